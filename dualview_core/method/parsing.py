"""From an LLM's raw reply to an accepted instruction or a named rejection.

`parse` extracts the instruction from `<answer><new_instruction>…</new_instruction></answer>`,
tolerating what small and large models actually emit: `<think>` blocks, markdown fences, chatter
around the answer, several answers (the last well-formed one wins: models draft, then settle),
unclosed tags, odd whitespace and unicode. Only text inside the tags can become an instruction: a
reply that restates the block after a prefill (`<answer><new_instruction>` + a server's answer from
scratch) keeps only the text after the last `<new_instruction>`, and a reply without the tags is
`no_answer`. `guard` then applies the content rules, chatter among them. Nothing here knows about
engines or files.

    >>> parse("<think>hmm</think><answer><new_instruction> Only  EU data. </new_instruction></answer>")
    Parsed(instruction='Only EU data.', rejection=None)
"""

from __future__ import annotations

import difflib
import html
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
    CHATTER = "chatter"  # a preamble or the model speaking of itself ("Sure! Here is…", "As an AI…")
    PROMPT_TOO_LONG = "prompt_too_long"  # prompt + max_tokens exceed the engine's context: never sent, or refused
    INVALID_REQUEST = "invalid_request"  # the engine refused the request; the same request fails again
    UNVERIFIED = "unverified"  # the verification pass did not confirm the reversal (see verification.py)
    ENGINE_ERROR = "engine_error"  # the engine failed for this row after its retries; the next run retries


@dataclass(frozen=True, slots=True)
class Parsed:
    instruction: str | None
    rejection: Rejection | None


_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_THINK_END = re.compile(r"</think>", re.I)  # a thinking model whose chat template opened <think> itself
_ANSWER_OPEN = re.compile(r"<answer>", re.I)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S | re.I)
_NEW_OPEN = re.compile(r"<new_instruction>", re.I)
_NEW_CLOSE = re.compile(r"</new_instruction>|</answer>", re.I)
_FENCE = re.compile(r"```[a-zA-Z]*")
_TAG = re.compile(r"</?[a-z_]+>", re.I)
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def clean(text: str) -> str:
    """NFKC, no zero-width characters, single spaces, no wrapping quotes."""
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    text = " ".join(text.split())
    return text.strip().strip('"“”\'`').strip()


def _after_thinking(raw: str) -> str:
    """The reply without its thinking: <think> blocks, and all before a closing </think> whose
    opening tag was in the prompt."""
    text = _THINK.sub("", raw)
    ends = list(_THINK_END.finditer(text))
    return text[ends[-1].end():] if ends else text


def reasoning(raw: str | None) -> str | None:
    """What a reply says before its last answer block: the reasoning a prompt asks for first (and a
    thinking model's thoughts), kept in the record and never part of the instruction. None when the
    reply opens with its answer, or has no answer block."""
    opens = list(_ANSWER_OPEN.finditer(raw or ""))
    if not opens:
        return None
    return raw[: opens[-1].start()].strip() or None


def parse(raw: str | None) -> Parsed:
    if not raw:
        return Parsed(None, Rejection.NO_ANSWER)
    text = _FENCE.sub("", _after_thinking(raw))
    answers = _ANSWER.findall(text)
    if not answers and "<new_instruction>" in text.lower():
        answers = [text]  # the <answer> wrapper was dropped but the inner tag is there
    for answer in reversed(answers):
        inner = _inner(answer)
        # the prompt shows seed text with & < > escaped (prompting.as_data); a model copying it gets plain text
        text = clean(html.unescape(_TAG.sub(" ", answer if inner is None else inner)))
        if text.rstrip(".").lower() == "none":  # also "None" inside the tag, as a prefill forces
            return Parsed(None, Rejection.NONE)
        if inner is not None:
            return Parsed(text, None) if text else Parsed(None, Rejection.EMPTY)
    return Parsed(None, Rejection.NO_ANSWER)


def _inner(answer: str) -> str | None:
    """The text after the last `<new_instruction>` up to its close, or None without one. The last
    opening wins: after a prefill, a server that answers from scratch restates the whole block, and
    whatever it wrote between the prefill and its own block is outside the answer."""
    opens = list(_NEW_OPEN.finditer(answer))
    if not opens:
        return None
    body = answer[opens[-1].end():]
    close = _NEW_CLOSE.search(body)
    return body[: close.start()] if close else body


# Mentions of the exercise itself: passages by name or letter, ids, labels, "the original instruction".
_META = re.compile(
    r"\b(passages?|documents? [a-z0-9]\b|doc ?ids?|docid|passage [ab]\b|the (original|current|previous) instruction"
    r"|instruction negative|relevance labels?|this task|the task|positive passage|negative passage)\b",
    re.I,
)
# A reply that talks to the reader instead of being an instruction: conversational openers, and the
# model speaking of itself or of its answer. First-person searcher phrasing ("I need…", "I can't read
# German, so…") is fine; only refusals and self-description are chatter.
_CHATTER_START = re.compile(
    r"^\W*(?:(?:sure|certainly|of course|okay|ok|alright|absolutely|great|yes|no problem|gladly)\s*[,!.:;]"
    r"|here(?:'s| is| are)\b|below is\b|(?:final |new |revised )?(?:answer|instruction|output|response)\s*:)",
    re.I,
)
_CHATTER_ANYWHERE = re.compile(
    r"\b(as an ai\b|as a (?:large )?language model|i(?:'m| am) (?:an ai|sorry|unable|not able)|sorry,|i apologi[sz]e"
    r"|i (?:cannot|can't|can not|won't|will not) (?:help|assist|comply|provide|create|write|generate|fulfil+|complete"
    r"|come up)|new instruction|revised instruction|rewritten instruction|this instruction|my instruction"
    r"|here(?:'s| is) (?:a|an|the|my|your)\b|hope (?:this|that|it) helps|let me know|feel free|happy to help"
    r"|let me (?:think|try|explain|know)|i (?:have|'ve) (?:written|created|swapped|made))",
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


# The content rules `guard` applies to a parsed instruction, which a filtering policy may waive (an
# empty answer is the parser's verdict, never waived).
GUARDS = frozenset({Rejection.CHATTER, Rejection.TOO_LONG, Rejection.SAME_AS_QUERY, Rejection.META, Rejection.TOO_SIMILAR})


def guard(instruction: str, original_instruction: str, query: str, cfg: GuardConfig = GuardConfig()) -> Rejection | None:
    """The first content rule `instruction` breaks, or None if it may be used."""
    if not instruction.strip():
        return Rejection.EMPTY
    if _CHATTER_START.search(instruction) or _CHATTER_ANYWHERE.search(instruction):
        return Rejection.CHATTER
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
