"""Synthesis bookkeeping: what to send to the engine, what is cached, and what came back.

Owns the cache key of one LLM call, the plan of a run (pending vs cached work, and how the seed set
changed since the last run), the SynthesisRecord of one answer, and the run's cost summary. It does
not call engines, touch files or know about Ray.

A call is identified by (seed_key, target_index, prompt_version, model_id, sampling params): the
same seed content asked the same way of the same model is answered once, ever.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dualview_core.keys import canonical_json, digest
from dualview_core.parsing import Parsed, Rejection


def cache_key(seed_key: str, target_index: int, prompt_version: str, model_id: str, sampling: Mapping) -> str:
    return digest(canonical_json([seed_key, target_index, prompt_version, model_id, dict(sampling)]))


@dataclass(frozen=True, slots=True)
class WorkItem:
    seed: Mapping  # a SEED_ROW dict
    target_index: int
    cache_key: str


@dataclass
class Plan:
    pending: list[WorkItem]  # to send to the engine
    cached: list[WorkItem]  # answered by an earlier run
    seeds: dict[str, str]  # query_id -> seed_key, for the next run's diff
    new: int = 0  # seeds whose query_id the last run did not have
    changed: int = 0  # same query_id, different content
    removed: int = 0  # in the last run, gone now
    unchanged: int = 0

    def counts(self) -> dict[str, int]:
        return {"pending": len(self.pending), "cached": len(self.cached), "new": self.new,
                "changed": self.changed, "removed": self.removed, "unchanged": self.unchanged}


def targets(seed: Mapping, per_negative: bool) -> range:
    """Which instruction negatives become N*: the first (the paper's setting) or each one."""
    return range(len(seed["instruction_negatives"]) if per_negative else min(1, len(seed["instruction_negatives"])))


def plan(seeds: Iterable[Mapping], cached_keys: set[str], previous: Mapping[str, str], *, per_negative: bool,
         prompt_version: str, model_id: str, sampling: Mapping) -> Plan:
    """Split the work into pending and cached, and diff the seed set against `previous`."""
    out = Plan(pending=[], cached=[], seeds={})
    for seed in seeds:
        out.seeds[seed["query_id"]] = seed["seed_key"]
        before = previous.get(seed["query_id"])
        if before is None:
            out.new += 1
        elif before != seed["seed_key"]:
            out.changed += 1
        else:
            out.unchanged += 1
        for t in targets(seed, per_negative):
            item = WorkItem(seed, t, cache_key(seed["seed_key"], t, prompt_version, model_id, sampling))
            (out.cached if item.cache_key in cached_keys else out.pending).append(item)
    out.removed = len(set(previous) - set(out.seeds))
    return out


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


def record(item: WorkItem, result: EngineResult, parsed: Parsed, *, prompt_version: str, model_id: str,
           sampling: Mapping, geometry_delta: float | None = None) -> dict:
    """A SYNTHESIS_RECORD dict. Engine failures are recorded too (and retried by the next run)."""
    rejection = Rejection.ENGINE_ERROR if result.error else _truncated(result, sampling) or parsed.rejection
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
    }


def _truncated(result: EngineResult, sampling: Mapping) -> Rejection | None:
    limit = sampling.get("max_tokens")
    if limit and result.completion_tokens is not None and result.completion_tokens >= limit:
        return Rejection.TRUNCATED
    return None


def is_final(rec: Mapping) -> bool:
    """A record that answers its cache key for good. Engine errors are not: the next run retries."""
    return rec["rejection"] != Rejection.ENGINE_ERROR.value


@dataclass
class CostSummary:
    rows: int = 0
    accepted: int = 0
    rejections: Counter = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    engine_seconds: float = 0.0
    attempts: int = 0
    started: float = field(default_factory=time.perf_counter)
    # arrival of answer groups: (seconds since start, rows). The first group pays the engine's
    # start-up; the rest show the steady rate.
    arrivals: list[tuple[float, int]] = field(default_factory=list)

    def mark_answers(self, rows: int) -> None:
        self.arrivals.append((time.perf_counter() - self.started, rows))

    def _timing(self) -> dict:
        if not self.arrivals:
            return {"first_answers_s": None, "steady_rows_per_s": None}
        (first_t, first_n), (last_t, _) = self.arrivals[0], self.arrivals[-1]
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
        self.prompt_tokens += rec["prompt_tokens"] or 0
        self.completion_tokens += rec["completion_tokens"] or 0
        self.engine_seconds += rec["latency_s"] or 0.0

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
        }
