"""The synthesis rules written plainly, for tests only: the in-memory plan of a run, which record
answers a cache key, and a run's outcome counts. Production computes the same at scale
(`dualview_core.synthesis.plan`, `dualview_core.synthesis.cache_index`, the driver's summary); the
unit tests compare those with these, on the same rows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dualview_core.method.parsing import Rejection
from dualview_core.synthesis.records import WorkItem, cache_key, targets


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


def is_final(rec: Mapping) -> bool:
    """A record that answers its cache key for good. Transient engine errors are not: the next run retries."""
    return rec["rejection"] != Rejection.ENGINE_ERROR.value


def final_records(records: Iterable[Mapping], max_error_runs: int) -> dict[str, Mapping]:
    """cache_key -> the record that answers it: the first final one, or, for a key that failed
    transiently in `max_error_runs` runs and never succeeded, its last failure. A record's run is
    its `run` (failures of one run count once); a record without one is a run of its own."""
    out: dict[str, Mapping] = {}
    failed_in: dict[str, set] = {}
    last_failure: dict[str, Mapping] = {}
    for n, rec in enumerate(records):
        if is_final(rec):
            out.setdefault(rec["cache_key"], rec)
        else:
            failed_in.setdefault(rec["cache_key"], set()).add(rec.get("run") or ("record", n))
            last_failure[rec["cache_key"]] = rec
    for key, runs in failed_in.items():
        if key not in out and len(runs) >= max_error_runs:
            out[key] = last_failure[key]
    return out


def outcomes(records: Iterable[Mapping]) -> dict:
    """Accepted and rejected-by-reason counts over the current items' final records."""
    rejected: Counter = Counter()
    accepted = 0
    for rec in records:
        if rec["rejection"]:
            rejected[rec["rejection"]] += 1
        else:
            accepted += 1
    return {"accepted": accepted, "rejected": sum(rejected.values()), "by_reason": dict(sorted(rejected.items()))}
