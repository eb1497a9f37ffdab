"""The verification pass: a second model call that checks one accepted reversal.

For a dual view (q, I_new, N*, P+) it asks three questions (prompts/verification.md): does N* meet q
under I_new, does P+ break I_new, does I_new stay on q's topic. A row passes only with three yeses;
anything else, an unreadable verdict included, is `unverified`. Owns the prompt's rendering, its
cache key (by content: the seed, the target, the instruction text, the prompt's version, model and
sampling) and the verdict's parsing. It does not call engines or touch files.

    >>> parse_verdict("<verdict><satisfies>yes</satisfies><violates>no</violates><on_topic>yes</on_topic></verdict>")
    Verdict(satisfies=True, violates=False, on_topic=True)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import prompts
from dualview_core.keys import canonical_json, digest
from dualview_core.method.parsing import Rejection
from dualview_core.method.prompting import Message, as_data, passage_text

QUESTIONS = ("satisfies", "violates", "on_topic")


@dataclass(frozen=True, slots=True)
class Verdict:
    satisfies: bool | None  # None: the reply did not answer this question
    violates: bool | None
    on_topic: bool | None

    @property
    def passed(self) -> bool:
        return self.satisfies is True and self.violates is True and self.on_topic is True


def verify_key(seed_key: str, target_index: int, instruction: str, prompt_version: str, model_id: str,
               sampling: Mapping) -> str:
    return digest(canonical_json(["verify", seed_key, target_index, instruction, prompt_version, model_id, dict(sampling)]))


def render(seed: Mapping, target_index: int, instruction: str, template: str) -> list[Message]:
    """Chat messages asking whether N* (passage 1) and P+ (passage 2) split under `instruction`."""
    target = seed["instruction_negatives"][target_index]
    fields = (f"QUERY: {as_data(seed['query'])}\nINSTRUCTION: {as_data(instruction)}\n\n"
              f"PASSAGE 1:\n{passage_text(target)}\n\nPASSAGE 2:\n{passage_text(seed['positives'][0])}")
    return [{"role": "system", "content": template}, {"role": "user", "content": fields}]


_ANSWER = {q: re.compile(rf"<{q}>\s*(yes|no)\b", re.I) for q in QUESTIONS}


def parse_verdict(raw: str | None) -> Verdict:
    """The three answers; the last one given for each question wins (models revise)."""
    values = []
    for q in QUESTIONS:
        found = _ANSWER[q].findall(raw or "")
        values.append(found[-1].lower() == "yes" if found else None)
    return Verdict(*values)


def verdict_rejection(verdict: Verdict) -> Rejection | None:
    return None if verdict.passed else Rejection.UNVERIFIED


def default_template() -> str:
    return prompts.load(prompts.VERIFICATION)
