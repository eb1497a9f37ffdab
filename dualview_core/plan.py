"""What a synthesis run does with its seeds, decided from one small row per seed row.

Pass one of a run reads the seed source in chunks, in parallel (tasks/planning.py), and gives back a
PLAN_ROW per source row: where it is (its locator, `dualview_core.chunks`), why it is quarantined or
else its identity digest, and for a synthesis seed its query_id, seed_key, how many calls it asks for
and the keys of those not yet cached (staged for the engine, or recorded without it). Those tasks
cannot see each other's rows; this module decides, over all of them and exactly as the sequential
`SeedValidator` would, what only the whole source decides:

- duplicates: the first valid row of an identity is kept, every later one is quarantined
  (`duplicate_id`);
- the limit: the first `limit` synthesis seeds in source order;
- the validation report, the seed map (query_id, seed_key) in source order, the chunks' offsets;
- the calls: staged keys of the seeds kept, keys recorded without the engine, the cached count, and
  the locators of staged rows to leave out (duplicates, seeds beyond the limit).

Memory: per source row a locator and an identity digest (32 bytes); per synthesis seed its two keys
and its pending keys, as Arrow. ~300 MB for 2.3M source rows behind a million synthesis seeds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.cache_index import SEED_MAP
from dualview_core.chunks import ROW_BITS, locator
from dualview_core.contracts import PLAN_ROW, Reason
from dualview_core.id_set import identity_digest
from dualview_core.seeds import identity, is_synthesis_seed

SEED_COLUMNS = ["locator", "query_id", "seed_key", "calls", "staged", "recorded"]


@dataclass
class Plan:
    report: dict  # ValidationReport.as_dict()
    seed_map: pa.Table  # SEED_MAP of the synthesis seeds kept, in source order
    offsets: dict[int, int]  # chunk -> position of its first row in the source
    duplicates: np.ndarray  # locators quarantined as duplicate_id, sorted
    seeds: np.ndarray  # locators of the synthesis seeds kept, sorted
    staged: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))  # keys staged for the engine
    recorded: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))  # keys recorded without it
    cached: int = 0
    drop: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # staged locators to leave out

    @property
    def pending(self) -> int:
        return len(self.staged) + len(self.recorded)


class PlanRows:
    """The PLAN_ROW table of one chunk, a row at a time (what a first-pass task gives back)."""

    def __init__(self, chunk: int):
        self.chunk = chunk
        self.columns: dict[str, list] = {name: [] for name in PLAN_ROW.names}

    def quarantined(self, row: int, reason: Reason) -> None:
        self._add(locator=locator(self.chunk, row), reason=reason.value)

    def valid(self, row: int, seed: dict, staged: list[str] | None = None, recorded: list[str] | None = None,
              calls: int = 0) -> None:
        """A valid SEED_ROW dict; for a synthesis seed, its `calls` and the keys of those not cached."""
        synthesis = is_synthesis_seed(seed)
        self._add(locator=locator(self.chunk, row), identity=identity_digest(identity(seed)).decode(),
                  instruct=seed["has_instruction"], negatives=bool(seed["instruction_negatives"]),
                  **({"query_id": seed["query_id"], "seed_key": seed["seed_key"], "calls": calls,
                      "staged": staged or [], "recorded": recorded or []} if synthesis else {}))

    def _add(self, **values) -> None:
        for name, column in self.columns.items():
            column.append(values.get(name))

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=PLAN_ROW)


class PlanBuilder:
    """PLAN_ROW tables added in any order (one or more per chunk); `resolve` decides over all of them."""

    def __init__(self):
        self.rows: Counter = Counter()  # chunk -> rows
        self.reasons: Counter = Counter()
        self.valid: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # locator, identity, instruct, negatives
        self.seeds: list[pa.Table] = []

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        chunks, counts = np.unique(table["locator"].to_numpy() >> ROW_BITS, return_counts=True)
        self.rows.update(dict(zip(chunks.tolist(), counts.tolist())))
        self.reasons.update(r for r in table["reason"].to_pylist() if r is not None)
        valid = table.filter(pc.is_null(table["reason"]))
        self.valid.append((valid["locator"].to_numpy(), valid["identity"].to_numpy(zero_copy_only=False).astype("S"),
                           valid["instruct"].to_numpy(zero_copy_only=False), valid["negatives"].to_numpy(zero_copy_only=False)))
        seeds = valid.filter(pc.is_valid(valid["query_id"]))
        if seeds.num_rows:
            self.seeds.append(seeds.select(SEED_COLUMNS))

    def resolve(self, limit: int | None = None) -> Plan:
        locators, identities, instruct, negatives = _concat(self.valid)
        order = np.lexsort((locators, identities))  # by identity, then source order
        first = np.ones(len(order), dtype=bool)
        first[1:] = identities[order][1:] != identities[order][:-1]
        kept = np.zeros(len(order), dtype=bool)
        kept[order[first]] = True
        duplicates = np.sort(locators[~kept])
        total = sum(self.rows.values())
        by_reason = self.reasons + Counter({Reason.DUPLICATE_ID.value: len(duplicates)} if len(duplicates) else {})
        quarantined = sum(by_reason.values())
        report = {"rows": total, "valid": total - quarantined, "quarantined": quarantined,
                  "by_reason": dict(sorted(by_reason.items())), "instruct": int(instruct[kept].sum()),
                  "non_instruct": int((~instruct[kept]).sum()),
                  "with_instruction_negatives": int((instruct[kept] & negatives[kept]).sum())}
        seeds = self._seeds()
        keep = ~np.isin(seeds["locator"].to_numpy(), duplicates)
        if limit is not None:
            keep &= np.cumsum(keep) <= limit
        chosen = seeds.filter(pa.array(keep))
        plan = Plan(report, chosen.select(["query_id", "seed_key"]).cast(SEED_MAP), self._offsets(), duplicates,
                    chosen["locator"].to_numpy())
        self.valid = []  # what `calls` needs is in `seeds`
        return _with_calls(plan, seeds, keep)

    def _seeds(self) -> pa.Table:
        return _sorted(self.seeds)

    def _offsets(self) -> dict[int, int]:
        chunks = sorted(self.rows)
        starts = np.concatenate([[0], np.cumsum([self.rows[c] for c in chunks])[:-1]]).astype(int)
        return dict(zip(chunks, starts.tolist()))


def with_calls(plan: Plan, tables: list[pa.Table]) -> Plan:
    """`plan` with the calls of its seeds taken from PLAN_ROW `tables` of a later pass (one that
    staged the chosen seeds only: the limit's second pass)."""
    seeds = _sorted([t.filter(pc.is_valid(t["query_id"])).select(SEED_COLUMNS) for t in tables if t.num_rows])
    return _with_calls(plan, seeds, np.isin(seeds["locator"].to_numpy(), plan.seeds))


def _sorted(seeds: list[pa.Table]) -> pa.Table:
    table = pa.concat_tables(seeds) if seeds else PLAN_ROW.empty_table().select(SEED_COLUMNS)
    return table.take(pc.sort_indices(table["locator"]))


def _with_calls(plan: Plan, seeds: pa.Table, keep: np.ndarray) -> Plan:
    chosen, left_out = seeds.filter(pa.array(keep)), seeds.filter(pa.array(~keep))
    plan.staged = pc.list_flatten(chosen["staged"]).combine_chunks() if chosen.num_rows else pa.array([], pa.string())
    plan.recorded = pc.list_flatten(chosen["recorded"]).combine_chunks() if chosen.num_rows else pa.array([], pa.string())
    plan.cached = int(pc.sum(chosen["calls"]).as_py() or 0) - plan.pending
    staged_out = pc.greater(pc.list_value_length(left_out["staged"]), 0) if left_out.num_rows else pa.array([], pa.bool_())
    plan.drop = left_out.filter(staged_out)["locator"].to_numpy() if left_out.num_rows else np.empty(0, np.int64)
    return plan


def _concat(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    if not parts:
        return np.empty(0, np.int64), np.empty(0, "S24"), np.empty(0, bool), np.empty(0, bool)
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))
