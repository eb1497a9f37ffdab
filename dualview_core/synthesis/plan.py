"""What a synthesis run does with its seeds, decided from one small row per seed row.

Pass one of a run reads the seed source in chunks, in parallel (tasks/synthesis/planning.py), and gives back a
PLAN_ROW per source row: where it is (its locator, `dualview_core.data.chunks`), why it is quarantined or
else its identity digest, and for a synthesis seed its query_id, seed_key, how many calls it asks for
and the keys of those not yet cached (staged for the engine, or recorded without it). Those tasks
cannot see each other's rows; this module decides, over all of them and exactly as the sequential
`SeedValidator` would, what only the whole source decides:

- duplicates: the first valid row of an identity is kept, every later one is quarantined
  (`duplicate_id`);
- the limit: the first `limit` synthesis seeds in source order;
- the validation report, the seed map (query_id, seed_key) in source order, the chunks' offsets;
- the calls: staged keys of the seeds kept, keys recorded without the engine, the cached count, and
  the locators of staged rows to leave out (duplicates, seeds beyond the limit); per seed kept, its
  calls and whether this run asks any of them (what may be kept of the last run's derived files).

Memory: per source row a locator and an identity digest (22 bytes with the flags); per synthesis
seed its two keys and its pending keys, as Arrow (~100 bytes). A chunk's rows come in source order,
so the chunks are put in order without sorting rows. ~170 MB for 2.4M source rows behind a million
synthesis seeds, twice that while `resolve` works.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.synthesis.cache_index import SEED_MAP
from dualview_core.data.chunks import ROW_BITS, locator
from dualview_core.contracts import PLAN_ROW, Reason
from dualview_core.data.id_set import identity_bytes
from dualview_core.data.seeds import identity, is_synthesis_seed

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
    asked: np.ndarray = field(default_factory=lambda: np.empty(0, bool))  # per seed kept: any call staged or recorded
    calls: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))  # per seed kept: its calls

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
        self._add(locator=locator(self.chunk, row), identity=identity_bytes(identity(seed)),
                  instruct=seed["has_instruction"], negatives=bool(seed["instruction_negatives"]),
                  **({"query_id": seed["query_id"], "seed_key": seed["seed_key"], "calls": calls,
                      "staged": staged or [], "recorded": recorded or []} if synthesis else {}))

    def _add(self, **values) -> None:
        for name, column in self.columns.items():
            column.append(values.get(name))

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=PLAN_ROW)


class PlanBuilder:
    """PLAN_ROW tables added in any order; `resolve` decides over all of them. A table holds
    consecutive rows of one chunk: a chunk's whole plan, or a part of it (Ray Data splits a task's
    output into blocks when it outgrows its block size)."""

    def __init__(self):
        self.rows: Counter = Counter()  # chunk -> rows
        self.reasons: Counter = Counter()
        self.valid: list[tuple[np.ndarray, ...]] = []  # per part: locator, identity (hi, lo), instruct, negatives
        self.seeds: list[pa.Table] = []  # per part: its synthesis seeds (SEED_COLUMNS), in source order

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        chunk = int(table["locator"][0].as_py()) >> ROW_BITS
        self.rows[chunk] += table.num_rows
        self.reasons.update(r for r in table["reason"].to_pylist() if r is not None)
        valid = table.filter(pc.is_null(table["reason"]))
        if valid.num_rows:
            self.valid.append((valid["locator"].to_numpy(), *_digests(valid["identity"]),
                               valid["instruct"].to_numpy(zero_copy_only=False), valid["negatives"].to_numpy(zero_copy_only=False)))
        seeds = valid.filter(pc.is_valid(valid["query_id"])).select(SEED_COLUMNS)
        if seeds.num_rows:
            self.seeds.append(seeds)

    def resolve(self, limit: int | None = None) -> Plan:
        """The plan; the builder is emptied on the way (what it held is in the plan, or no longer needed)."""
        locators, hi, lo, instruct, negatives = _concat(self.valid)
        self.valid = []
        order = np.lexsort((locators, lo, hi))  # by identity, then source order
        first = np.ones(len(order), dtype=bool)
        first[1:] = (hi[order][1:] != hi[order][:-1]) | (lo[order][1:] != lo[order][:-1])
        kept = np.zeros(len(order), dtype=bool)
        kept[order[first]] = True
        del order, first, hi, lo
        duplicates = np.sort(locators[~kept])
        total = sum(self.rows.values())
        by_reason = self.reasons + Counter({Reason.DUPLICATE_ID.value: len(duplicates)} if len(duplicates) else {})
        quarantined = sum(by_reason.values())
        report = {"rows": total, "valid": total - quarantined, "quarantined": quarantined,
                  "by_reason": dict(sorted(by_reason.items())), "instruct": int(instruct[kept].sum()),
                  "non_instruct": int((~instruct[kept]).sum()),
                  "with_instruction_negatives": int((instruct[kept] & negatives[kept]).sum())}
        seeds, self.seeds = _in_order(self.seeds), []
        keep = ~np.isin(seeds["locator"].to_numpy(), duplicates)
        if limit is not None:
            keep &= np.cumsum(keep) <= limit
        plan = Plan(report, SEED_MAP.empty_table(), self._offsets(), duplicates, np.empty(0, np.int64))
        return _with_calls(plan, seeds, keep, seed_map=True)

    def _offsets(self) -> dict[int, int]:
        chunks = sorted(self.rows)
        starts = np.concatenate([[0], np.cumsum([self.rows[c] for c in chunks])[:-1]]).astype(int)
        return dict(zip(chunks, starts.tolist()))


def with_calls(plan: Plan, tables: list[pa.Table]) -> Plan:
    """`plan` with the calls of its seeds taken from PLAN_ROW `tables` of a later pass (one that
    staged the chosen seeds only: the limit's second pass)."""
    seeds = _in_order([t.filter(pc.is_valid(t["query_id"])).select(SEED_COLUMNS) for t in tables])
    return _with_calls(plan, seeds, np.isin(seeds["locator"].to_numpy(), plan.seeds))


def _in_order(tables: list[pa.Table]) -> pa.Table:
    """Parts of chunks' seed tables, each in source order and given in any order, as one table in
    source order (parts ordered by their first locator; the rows are not copied)."""
    tables = sorted((t for t in tables if t.num_rows), key=lambda t: t["locator"][0].as_py())
    return pa.concat_tables(tables) if tables else PLAN_ROW.empty_table().select(SEED_COLUMNS)


def _with_calls(plan: Plan, seeds: pa.Table, keep: np.ndarray, seed_map: bool = False) -> Plan:
    """`plan` with what the kept `seeds` (a PLAN_ROW table's seed columns) ask for, and, with
    `seed_map`, the seeds chosen and the seed map."""
    mask = pa.array(keep)
    chosen = seeds.filter(mask) if not keep.all() else seeds
    if seed_map:
        plan.seed_map = chosen.select(["query_id", "seed_key"]).cast(SEED_MAP)
        plan.seeds = chosen["locator"].to_numpy()
    plan.staged = pc.list_flatten(chosen["staged"]).combine_chunks() if chosen.num_rows else pa.array([], pa.string())
    plan.recorded = pc.list_flatten(chosen["recorded"]).combine_chunks() if chosen.num_rows else pa.array([], pa.string())
    plan.cached = int(pc.sum(chosen["calls"]).as_py() or 0) - plan.pending
    plan.calls = chosen["calls"].to_numpy().astype(np.int32) if chosen.num_rows else np.empty(0, np.int32)
    plan.asked = (pc.add(pc.list_value_length(chosen["staged"]), pc.list_value_length(chosen["recorded"])).to_numpy() > 0
                  if chosen.num_rows else np.empty(0, bool))
    left_out = seeds.filter(pc.invert(mask)).select(["locator", "staged"]) if not keep.all() else None
    if left_out is not None and left_out.num_rows:
        plan.drop = left_out.filter(pc.greater(pc.list_value_length(left_out["staged"]), 0))["locator"].to_numpy()
    return plan


def _digests(identity: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-width 12-byte digests as two integer arrays (high 8 bytes, low 4), for sorting."""
    array = identity.combine_chunks() if isinstance(identity, pa.ChunkedArray) else identity
    if not len(array):
        return np.empty(0, ">u8"), np.empty(0, ">u4")
    raw = np.frombuffer(array.buffers()[1], dtype=[("hi", ">u8"), ("lo", ">u4")], count=len(array) + array.offset)
    raw = raw[array.offset:]
    return raw["hi"].copy(), raw["lo"].copy()


def _concat(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    if not parts:
        return np.empty(0, np.int64), np.empty(0, ">u8"), np.empty(0, ">u4"), np.empty(0, bool), np.empty(0, bool)
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(5))
