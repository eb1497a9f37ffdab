"""Synthesis bookkeeping: what to send to the engine, what is cached, and what came back.

Owns the cache key of one LLM call, the SynthesisRecord of one answer, how an engine failure is
sorted, and the run's cost summary. It does not call engines, touch files or know about Ray; a
run's plan is `plan.py`'s, which record answers a key `cache_index.py`'s.

A call is identified by (seed_key, target_index, prompt_version, model_id, sampling params): the
same seed content asked the same way of the same model is answered once, ever.

Every planned item ends as a record: accepted, or rejected with a reason. Engine failures are
recorded too; `error_rejection` sorts them into final ones (`prompt_too_long`, `invalid_request`: the
same request fails again) and transient ones (`engine_error`), which later runs retry until a key
has failed in `max_error_runs` runs, then the last failure stands (`cache_index`).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from dualview_core.keys import canonical_json, digest
from dualview_core.method.parsing import GUARDS, Parsed, Rejection, reasoning

_GUARD_VALUES = frozenset(g.value for g in GUARDS)


def cache_key(seed_key: str, target_index: int, prompt_version: str, model_id: str, sampling: Mapping) -> str:
    return digest(canonical_json([seed_key, target_index, prompt_version, model_id, dict(sampling)]))


@dataclass(frozen=True, slots=True)
class WorkItem:
    seed: Mapping  # a SEED_ROW dict
    target_index: int
    cache_key: str


def targets(seed: Mapping, per_negative: bool) -> range:
    """Which instruction negatives become N*: the first (the paper's setting) or each one."""
    return range(len(seed["instruction_negatives"]) if per_negative else min(1, len(seed["instruction_negatives"])))


@dataclass(frozen=True, slots=True)
class EngineResult:
    """What an engine returns for one work item."""

    cache_key: str
    raw_response: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    attempts: int = 1
    error: str | None = None  # set when the engine failed for this row after its retries


# How engines word "the prompt does not fit" (vLLM's engine and server, OpenAI-style servers, ours).
_TOO_LONG = re.compile(r"prompt_too_long|maximum (model|context) length|context length|max_model_len|context window"
                       r"|too many tokens|is longer than the maximum", re.I)
# Refusals that no retry fixes: a client error from an HTTP endpoint, or the engine rejecting the input.
_INVALID = re.compile(r"^(RuntimeError: HTTP 4\d\d|ValueError|TypeError)\b")


def error_rejection(error: str) -> Rejection:
    """The rejection an engine error stands for: final (prompt_too_long, invalid_request) or not."""
    if _TOO_LONG.search(error):
        return Rejection.PROMPT_TOO_LONG
    if _INVALID.search(error):
        return Rejection.INVALID_REQUEST
    return Rejection.ENGINE_ERROR


def prompt_too_long(prompt_tokens: int, max_tokens: int, context: int) -> str | None:
    """An engine error text for a prompt whose answer cannot fit in the context, or None if it fits."""
    if prompt_tokens + max_tokens <= context:
        return None
    return f"prompt_too_long: {prompt_tokens} prompt tokens + {max_tokens} max_tokens > {context} context"


def seed_fields(seed: Mapping) -> dict:
    """The seed columns of a record (contract version 2): what a person reads next to the answer."""
    return {"query_id": seed["query_id"], "query": seed["query"], "original_instruction": seed["instruction"]}


def guard_verdict(rec: Mapping) -> str | None:
    """The first content guard a record's instruction breaks; None without an instruction (a
    version-2 record keeps the verdict in its rejection)."""
    verdict = rec.get("guard")
    if verdict is None and rec["instruction"] is not None and rec["rejection"] in _GUARD_VALUES:
        return rec["rejection"]
    return verdict


def under_policy(rec: Mapping, filtering: str, geometry: bool = False) -> str | None:
    """A record's rejection under filtering policy `filtering` and the geometry filter on or off.

    What neither decides stands (a failed call, a truncated or unparseable reply, None, an empty
    answer). Then 'guards' and 'verify' apply the stored guard verdict and 'none' waives it; then,
    with `geometry`, a stored delta <= 0 rejects. A pure function of the record and the settings, so
    a cached record judged under other settings reads as this run's would; a record judged with the
    geometry filter off has no delta, and turning the filter on later does not reject it."""
    rejection, verdict = rec["rejection"], guard_verdict(rec)
    if rejection is not None and rejection not in (verdict, Rejection.GEOMETRY.value):
        return rejection
    if filtering != "none" and verdict is not None:
        return verdict
    delta = rec.get("geometry_delta")
    return Rejection.GEOMETRY.value if geometry and delta is not None and delta <= 0 else None


def record(item: WorkItem, result: EngineResult, parsed: Parsed, *, prompt_version: str, model_id: str,
           sampling: Mapping, geometry_delta: float | None = None, guard: Rejection | None = None,
           filtering: str = "guards") -> dict:
    """A SYNTHESIS_RECORD dict. Engine failures are recorded too; transient ones are retried later.
    `parsed` is the reply as parsed; `guard`, the first content guard its instruction breaks, is
    stored whatever the policy and becomes the rejection unless `filtering` is 'none'."""
    failed = error_rejection(result.error) if result.error else _truncated(result, sampling)
    rejection = failed or parsed.rejection
    if rejection is None and guard is not None and filtering != "none":
        rejection = guard
    return {
        "cache_key": item.cache_key,
        "seed_key": item.seed["seed_key"],
        "target_index": item.target_index,
        "prompt_version": prompt_version,
        "model_id": model_id,
        "sampling_params": canonical_json(dict(sampling)).decode(),
        "raw_response": result.error if result.error else result.raw_response,
        "instruction": None if result.error else parsed.instruction,
        "rejection": rejection.value if rejection else None,
        "geometry_delta": geometry_delta,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "latency_s": result.latency_s,
        "attempts": result.attempts,
        **seed_fields(item.seed),
        "reasoning": None if result.error else reasoning(result.raw_response),
        "guard": guard.value if guard is not None and not result.error else None,
    }


def _truncated(result: EngineResult, sampling: Mapping) -> Rejection | None:
    limit = sampling.get("max_tokens")
    if limit and result.completion_tokens is not None and result.completion_tokens >= limit:
        return Rejection.TRUNCATED
    return None


@dataclass
class CostSummary:
    rows: int = 0
    accepted: int = 0
    rejections: Counter = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    engine_seconds: float = 0.0
    attempts: int = 0
    verify_rows: int = 0  # verification calls made by this run
    verify_prompt_tokens: int = 0
    verify_completion_tokens: int = 0
    verify_checked: int = 0  # current rows the guards accepted and the verifier judged (cached or not)
    verify_failed: int = 0  # of those, the verifier said no: its disagreement with the guards
    started: float = field(default_factory=time.perf_counter)
    # arrival of answer groups: (seconds since start, rows). The first group pays the engine's
    # start-up; the rest show the steady rate.
    arrivals: list[tuple[float, int]] = field(default_factory=list)

    def mark_answers(self, rows: int) -> None:
        self.arrivals.append((time.perf_counter() - self.started, rows))

    def _timing(self) -> dict:
        if not self.arrivals:
            return {"first_answers_s": None, "steady_rows_per_s": None}
        (first_t, _), (last_t, _) = self.arrivals[0], self.arrivals[-1]
        after_first = sum(n for _, n in self.arrivals[1:])
        steady = after_first / (last_t - first_t) if last_t > first_t else None
        return {"first_answers_s": round(first_t, 3), "steady_rows_per_s": round(steady, 3) if steady else None}

    def add(self, rec: Mapping) -> None:
        self.rows += 1
        self.attempts += rec["attempts"]
        if rec["rejection"]:
            self.rejections[rec["rejection"]] += 1
        else:
            self.accepted += 1
        if rec["attempts"]:  # a row rejected before the engine (attempts 0) cost nothing
            self.prompt_tokens += rec["prompt_tokens"] or 0
        self.completion_tokens += rec["completion_tokens"] or 0
        self.engine_seconds += rec["latency_s"] or 0.0

    def add_verification_call(self, rec: Mapping) -> None:
        """A verification record this run asked for (its tokens were spent now)."""
        self.verify_rows += 1
        self.verify_prompt_tokens += rec["prompt_tokens"] or 0
        self.verify_completion_tokens += rec["completion_tokens"] or 0

    def add_verdict(self, rec: Mapping) -> None:
        """The verdict on a current accepted row, asked now or cached."""
        self.verify_checked += 1
        self.verify_failed += rec["rejection"] is not None

    def _verification(self) -> dict:
        rate = round(self.verify_failed / self.verify_checked, 4) if self.verify_checked else None
        return {"verify_rows": self.verify_rows, "verify_prompt_tokens": self.verify_prompt_tokens,
                "verify_completion_tokens": self.verify_completion_tokens, "verify_checked": self.verify_checked,
                "verify_failed": self.verify_failed, "verify_disagreement_rate": rate}

    def as_dict(self, wall_seconds: float) -> dict:
        tokens = self.prompt_tokens + self.completion_tokens
        return {
            "engine_rows": self.rows,
            "accepted": self.accepted,
            "acceptance_rate": round(self.accepted / self.rows, 4) if self.rows else None,
            "rejections": dict(sorted(self.rejections.items())),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "attempts": self.attempts,
            "engine_seconds": round(self.engine_seconds, 3),
            "wall_seconds": round(wall_seconds, 3),
            "rows_per_s": round(self.rows / wall_seconds, 3) if wall_seconds > 0 else None,
            "tokens_per_s": round(tokens / wall_seconds, 1) if wall_seconds > 0 else None,
            **self._timing(),
            **self._verification(),
        }
