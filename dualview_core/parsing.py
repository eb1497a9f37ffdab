"""From an LLM's raw reply to an accepted instruction or a named rejection.

`parse` extracts the instruction from `<answer><new_instruction>…</new_instruction></answer>`,
tolerating what small and large models actually emit: `<think>` blocks, markdown fences, chatter
around the answer, several answers (the last well-formed one wins: models draft, then settle),
unclosed tags, odd whitespace and unicode. `guard` then applies the content rules. Nothing here
knows about engines or files.

    >>> parse("<think>hmm</think><answer><new_instruction> Only  EU data. </new_instruction></answer>")
    Parsed(instruction='Only EU data.', rejection=None)
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from dualview_core.config import GuardConfig


class Rejection(StrEnum):
    """Why a synthesized instruction was not used. Values are stored; keep them stable."""

    NO_ANSWER = "no_answer"  # no recognisable answer in the reply
    NONE = "none"  # the model declined (<answer>None</answer>)
    EMPTY = "empty"
    TOO_LONG = "too_long"  # more than the allowed sentences or characters
    TOO_SIMILAR = "too_similar"  # a near copy of the original instruction
    META = "meta"  # talks about passages, ids, the task or the original instruction
    SAME_AS_QUERY = "same_as_query"
    TRUNCATED = "truncated"  # the reply hit the token limit: whatever it said is unfinished
    GEOMETRY = "geometry"  # the frozen encoder does not move the query toward the new positive
    ENGINE_ERROR = "engine_error"  # the engine failed for this row after its retries


@dataclass(frozen=True, slots=True)
class Parsed:
    instruction: str | None
    rejection: Rejection | None


_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S | re.I)
_NEW = re.compile(r"<new_instruction>(.*?)(?:</new_instruction>|</answer>|$)", re.S | re.I)
_FENCE = re.compile(r"```[a-zA-Z]*")
_TAG = re.compile(r"</?[a-z_]+>", re.I)
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def clean(text: str) -> str:
    """NFKC, no zero-width characters, single spaces, no wrapping quotes."""
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    text = " ".join(text.split())
    return text.strip().strip('"“”\'`').strip()


def parse(raw: str | None) -> Parsed:
    if not raw:
        return Parsed(None, Rejection.NO_ANSWER)
    text = _FENCE.sub("", _THINK.sub("", raw))
    answers = _ANSWER.findall(text)
    if not answers and "<new_instruction>" in text.lower():
        answers = [text]  # the <answer> wrapper was dropped but the inner tag is there
    for answer in reversed(answers):
        inner = _NEW.search(answer)
        text = clean(_TAG.sub(" ", inner.group(1) if inner else answer))
        if text.rstrip(".").lower() == "none":  # also "None" inside the tag, as a prefill forces
            return Parsed(None, Rejection.NONE)
        if inner:
            return Parsed(text, None) if text else Parsed(None, Rejection.EMPTY)
    return Parsed(None, Rejection.NO_ANSWER)


# Mentions of the exercise itself: passages by name or letter, ids, labels, "the original instruction".
_META = re.compile(
    r"\b(passages?|documents? [a-z0-9]\b|doc ?ids?|docid|passage [ab]\b|the (original|current|previous) instruction"
    r"|instruction negative|relevance labels?|this task|the task|positive passage|negative passage)\b",
    re.I,
)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")


def sentence_count(text: str) -> int:
    """Sentences, split after . ! or ? followed by space ("Use U.S. data." counts 2: close enough
    for a bound of two, and errs on the strict side)."""
    return len([part for part in _SENTENCE_BREAK.split(text.strip()) if part])


def similarity(a: str, b: str) -> float:
    """Word-sequence similarity in [0, 1] (difflib's ratio over lower-cased words)."""
    return difflib.SequenceMatcher(None, a.lower().split(), b.lower().split(), autojunk=False).ratio()


def guard(instruction: str, original_instruction: str, query: str, cfg: GuardConfig = GuardConfig()) -> Rejection | None:
    """The first content rule `instruction` breaks, or None if it may be used."""
    if not instruction.strip():
        return Rejection.EMPTY
    if sentence_count(instruction) > cfg.max_sentences or len(instruction) > cfg.max_chars:
        return Rejection.TOO_LONG
    if clean(instruction).lower().rstrip(".?!") == clean(query).lower().rstrip(".?!"):
        return Rejection.SAME_AS_QUERY
    if _META.search(instruction):
        return Rejection.META
    if similarity(instruction, original_instruction) >= cfg.max_similarity:
        return Rejection.TOO_SIMILAR
    return None


def judge(raw: str | None, original_instruction: str, query: str, cfg: GuardConfig = GuardConfig()) -> Parsed:
    """parse + guard: the instruction to use, or why not."""
    parsed = parse(raw)
    if parsed.instruction is None:
        return parsed
    rejection = guard(parsed.instruction, original_instruction, query, cfg)
    return Parsed(parsed.instruction, rejection)
