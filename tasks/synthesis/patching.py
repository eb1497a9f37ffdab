"""A run that changed few seeds keeps the rest of the last run's derived files instead of deriving
them again.

A chosen seed's rows in dual_views.parquet and rejections.parquet depend only on the seed (its
key), its records and the settings that judge them. When the last completed run left the record
shards as this run found them and derived under the same settings, every chosen seed that this run
asked nothing about, and whose key the last run's files hold with exactly one row per call, has its
rows there already, as a full derive would write them. Only the other seeds (changed, new, asked
again) are derived from the source (tasks/synthesis/deriving.py, with each row's locator); then each
file is written again as a merge, by locator, of the kept rows (read a row group at a time) and the
new ones. Both come in source order; where the kept rows are not in this run's source order (the
source was reordered), or too few seeds are kept, the run derives everything instead.

The report's counts are the last run's, less what the dropped rows counted (a rejection carries its
record; an accepted row's record is found again from its dual-view key), plus the new rows'; its
examples are the first rows of each outcome in the merged files. The result equals a full derive:
the same rows in the same order and the same report.md.

The driver holds the kept seeds' keys and locators (tens of bytes a seed) and a few row groups: each
input's next READ_AHEAD decoded ahead (dualview_core/storage/tables.py) and the one being merged.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from contextlib import closing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dualview_core.contracts import DUAL_VIEW_ROW, SYNTHESIS_RECORD
from dualview_core.keys import canonical_json, digest
from dualview_core.method.dual_view import dual_view_key
from dualview_core.storage.layout import DUAL_VIEWS, REJECTIONS
from dualview_core.storage.tables import TableWriter, read_ahead
from dualview_core.synthesis.records import cache_key, guard_verdict
from dualview_core.synthesis.report import EXAMPLES_PER_REASON
from tasks.synthesis.record_store import RecordStore

DERIVED = "derived"  # OUT/.work/derived/: the derive tasks' parts, one per chunk and file
LOCATOR = "locator"  # a derived part's extra column: the row's seed, as a locator (dualview_core.data.chunks)
MIN_KEPT = 0.5  # keep the last run's rows when at least this share of the chosen seeds is unchanged
MAX_TARGET = 1 << 12  # an accepted row's target index is looked for below this (a seed's instruction negatives)
ROW_COLUMNS = {DUAL_VIEWS: DUAL_VIEW_ROW, REJECTIONS: SYNTHESIS_RECORD}


def located(schema: pa.Schema) -> pa.Schema:
    """A derived part's schema: the file's, with each row's locator."""
    return schema.append(pa.field(LOCATOR, pa.int64(), nullable=False))


def derive_settings(ask, cfg) -> str:
    """What judges the records into rows besides the seeds and the shards: equal digests, equal rows
    for an unchanged seed. (`max_error_runs` decides which calls are asked again, and a seed asked
    about is derived again whatever it is.)"""
    return digest(canonical_json([ask.version, ask.model_id, ask.sampling, cfg.per_negative,
                                  cfg.filtering, cfg.geometry_filter, cfg.limit, DUAL_VIEW_ROW.metadata[b"contract"].decode(),
                                  SYNTHESIS_RECORD.metadata[b"contract"].decode()]))


@dataclass
class Tally:
    """What report.md counts over a run's rows: outcomes (accepted or the rejection), the content
    guards' verdicts, the replies' lengths in tokens."""

    outcomes: Counter = field(default_factory=Counter)
    guards: Counter = field(default_factory=Counter)
    lengths: Counter = field(default_factory=Counter)

    def add(self, records: Iterable[Mapping]) -> None:
        """Count records as a derive pass sees them (`rejection` under the run's policy, `guard`)."""
        for r in records:
            self.outcomes[r["rejection"] or "accepted"] += 1
            if r["guard"]:
                self.guards[r["guard"]] += 1
            if r["attempts"] and r["completion_tokens"] is not None:
                self.lengths[r["completion_tokens"]] += 1

    def merge(self, summary: Mapping) -> None:
        """Add a derive task's summary (tasks/synthesis/deriving.py's `derive_chunk`)."""
        self.outcomes.update(summary["outcomes"])
        self.guards.update(summary["guards"])
        self.lengths.update({int(n): c for n, c in summary["lengths"].items()})

    def without(self, other: Tally) -> Tally | None:
        """These counts less `other`'s; None where `other` counts more than these hold (they do not
        describe the same rows)."""
        out = Tally()
        for name in ("outcomes", "guards", "lengths"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if any(theirs[k] > mine.get(k, 0) for k in theirs):
                return None
            setattr(out, name, Counter({k: mine[k] - theirs.get(k, 0) for k in mine if mine[k] - theirs.get(k, 0) > 0}))
        return out

    def plus(self, other: Tally) -> Tally:
        return Tally(self.outcomes + other.outcomes, self.guards + other.guards, self.lengths + other.lengths)

    def as_dict(self) -> dict:
        """For the manifest (JSON: the lengths' keys become strings)."""
        return {"outcomes": dict(sorted(self.outcomes.items())), "guards": dict(sorted(self.guards.items())),
                "lengths": {str(n): c for n, c in sorted(self.lengths.items())}}

    @classmethod
    def of(cls, saved: Mapping) -> Tally:
        return cls(Counter(saved["outcomes"]), Counter(saved["guards"]), Counter({int(n): c for n, c in saved["lengths"].items()}))


@dataclass(frozen=True)
class Reuse:
    """Which seeds keep the last run's rows: how many of the chosen seeds do; the locators of those
    to derive (sorted); the rows kept over both files; and, per file, each row's seed's locator in
    this run (-1 where the seed is not kept), in the file's row order."""

    kept: int
    fresh: np.ndarray
    rows: int
    files: Mapping[str, np.ndarray]


def reuse_of(store: RecordStore, seed_keys: pa.Array | pa.ChunkedArray, seeds: np.ndarray, asked: np.ndarray,
             calls: np.ndarray) -> Reuse | None:
    """Which of the chosen `seeds` (locators, in source order, with their `seed_keys`, whether this
    run `asked` about them and their `calls`) keep the last run's rows; None when too few do or the
    kept rows are not in this run's order. Reads the seed_key column of the two derived files once;
    keys are matched through Arrow's hash lookup, which a million keys take in a fraction of a
    sorted search's time."""
    before = {name: _column(store, name, "seed_key") for name in ROW_COLUMNS}
    if not len(seeds) or not any(len(k) for k in before.values()):
        return None
    keys = seed_keys.combine_chunks() if isinstance(seed_keys, pa.ChunkedArray) else seed_keys
    if pc.count_distinct(keys).as_py() != len(keys):  # a seed's rows are found by its key alone
        return None
    found = {name: _index_in(file_keys, keys) for name, file_keys in before.items()}  # each row's seed among `keys`
    del before
    rows = np.zeros(len(keys), dtype=np.int64)  # each chosen seed's rows over both files
    for at in found.values():
        rows += np.bincount(at[at >= 0], minlength=len(keys))
    kept = ~asked & (rows > 0) & (rows == calls)
    if kept.sum() < MIN_KEPT * len(seeds):
        return None
    locators = np.where(kept, seeds, -1)
    files = {}
    for name, at in found.items():  # each file's kept rows, in its order, must be in this run's source order
        files[name] = np.where(at >= 0, locators[np.maximum(at, 0)], -1)
        ordered = files[name][files[name] >= 0]
        if np.any(np.diff(ordered) < 0):
            return None
    return Reuse(int(kept.sum()), seeds[~kept], int(calls[kept].sum()), files)


def _index_in(values: pa.Array | pa.ChunkedArray, keys: pa.Array) -> np.ndarray:
    """Where each of `values` is in `keys` (distinct), -1 where it is not."""
    found = pc.index_in(values, value_set=keys)
    return pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


@dataclass(frozen=True)
class Kept:
    """What a derive pass keeps of the last run's: which seeds' rows, the last run's counts less the
    rows not kept, and how to fetch records by cache key (the examples' records)."""

    reuse: Reuse
    base: Tally
    fetch: Callable


def kept_rows(store: RecordStore, seed_keys: pa.Array | pa.ChunkedArray, seeds: np.ndarray, asked: np.ndarray,
              calls: np.ndarray, tallies: Mapping, fetch: Callable, ask) -> Kept | None:
    """What this run keeps of the last run's derived files (`reuse_of`), with the last run's counts
    (`tallies`) less those of the rows it drops; None when it keeps nothing or the counts do not
    add up to the rows kept."""
    reuse = reuse_of(store, seed_keys, seeds, asked, calls)
    gone = dropped(store, reuse, fetch, ask) if reuse is not None else None
    base = Tally.of(tallies).without(gone) if gone is not None else None
    if base is None or sum(base.outcomes.values()) != reuse.rows:
        return None
    return Kept(reuse, base, fetch)


def dropped(store: RecordStore, reuse: Reuse, fetch: Callable, ask) -> Tally | None:
    """What the last run's rows of seeds not kept counted in its report; None when an accepted row's
    record cannot be found again (the run then derives everything)."""
    tally = Tally()
    for table, at in _located(store, REJECTIONS, reuse, ["seed_key", "rejection", "guard", "attempts", "completion_tokens"]):
        tally.add(table.filter(pa.array(at < 0)).to_pylist())
    for table, at in _located(store, DUAL_VIEWS, reuse, ["seed_key", "dual_view_key", "instruction"]):
        gone = table.filter(pa.array(at < 0))
        records = accepted_records(gone.to_pylist(), fetch, ask)
        if records is None:
            return None
        tally.add({**r, "rejection": None, "guard": guard_verdict(r)} for r in records)
    return tally


def accepted_records(rows: list[dict], fetch: Callable, ask) -> list[dict] | None:
    """The record behind each dual-view row (its target index found from its dual-view key); None
    if one is not found."""
    keys = []
    for row in rows:
        target = next((t for t in range(MAX_TARGET)
                       if dual_view_key(row["seed_key"], t, row["instruction"]) == row["dual_view_key"]), None)
        if target is None:
            return None
        keys.append(cache_key(row["seed_key"], target, ask.version, ask.model_id, ask.sampling))
    records = fetch(keys) if keys else []
    return None if any(r is None for r in records) else records


def patch(store: RecordStore, reuse: Reuse, parts: Mapping[str, list[str]], fetch: Callable, ask
          ) -> tuple[dict[str, int], dict[str, list[dict]]]:
    """Both derived files written again from the kept rows and the new `parts` (per file, the part
    files under OUT/.work/derived/ in chunk order), and the first examples of each outcome: (rows
    per file, examples per outcome)."""
    written, examples = {}, {}
    for name, schema in ROW_COLUMNS.items():
        first: list[pa.Table] = []
        with TableWriter(store.path(name), schema, store.options) as out:
            with closing(read_ahead(_kept(store, name, reuse))) as kept, \
                    closing(read_ahead(derived_parts(store, parts[name]))) as new:
                for table in merged(kept, new):
                    out.write(table)
                    first.append(_first_of_each(table, first))
        written[name] = out.rows
        rows = [r for t in first for r in t.to_pylist()]
        if name == DUAL_VIEWS:
            records = accepted_records(rows, fetch, ask) if rows else []
            examples["accepted"] = [{**rec, "query_id": row["query_id"], "query": row["query"],
                                     "original_instruction": row["original_instruction"], "guard": guard_verdict(rec),
                                     "rejection": None} for row, rec in zip(rows, records or [])]
        else:
            for r in rows:
                examples.setdefault(r["rejection"], []).append(r)
    return written, examples


def _first_of_each(table: pa.Table, before: list[pa.Table]) -> pa.Table:
    """The rows of `table` among the first EXAMPLES_PER_REASON of their outcome, counting `before`."""
    reason = "rejection" if "rejection" in table.column_names else None
    seen: Counter = Counter()
    for t in before:
        seen.update(t[reason].to_pylist() if reason else ["accepted"] * t.num_rows)
    values = table[reason].to_pylist() if reason else ["accepted"] * table.num_rows
    keep = []
    for i, value in enumerate(values):
        if seen[value] < EXAMPLES_PER_REASON:
            seen[value] += 1
            keep.append(i)
    return table.take(pa.array(keep, pa.int64()))


def _located(store: RecordStore, name: str, reuse: Reuse, columns: list[str] | None = None
             ) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """The last run's file a row group at a time, with each row's seed's locator in this run (-1:
    not kept)."""
    start = 0
    for table in _groups(store, name, columns):
        yield table, reuse.files[name][start:start + table.num_rows]
        start += table.num_rows


def _kept(store: RecordStore, name: str, reuse: Reuse) -> Iterator[tuple[pa.Table, np.ndarray]]:
    for table, at in _located(store, name, reuse):
        keep = at >= 0
        if keep.any():
            yield table.filter(pa.array(keep)), at[keep]


def derived_parts(store: RecordStore, parts: list[str]) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """The rows of the named parts in OUT/.work/derived/, in the order given, a row group at a time:
    each group without its locator column, and the locators."""
    for part in parts:
        with store.fs.open(posixpath.join(store.work(DERIVED), part), "rb") as f:
            file = pq.ParquetFile(f)
            for group in range(file.num_row_groups):
                table = file.read_row_group(group)
                if table.num_rows:
                    yield table.drop_columns([LOCATOR]), table[LOCATOR].to_numpy()


def merged(a: Iterator[tuple[pa.Table, np.ndarray]], b: Iterator[tuple[pa.Table, np.ndarray]]) -> Iterator[pa.Table]:
    """Two streams of (rows, their locators), each in locator order and never sharing a locator, as
    one stream in locator order (a row's place among those of its own seed kept)."""
    pending: list[tuple[pa.Table, np.ndarray]] = []
    b = iter(b)
    done = False
    for table, at in a:
        while not done and (not pending or pending[-1][1][-1] <= at[-1]):
            nxt = next(b, None)
            if nxt is None:
                done = True
            else:
                pending.append(nxt)
        take, rest = [], []
        for t, where in pending:
            cut = int(np.searchsorted(where, at[-1], side="right"))
            if cut:
                take.append((t.slice(0, cut), where[:cut]))
            if cut < len(where):
                rest.append((t.slice(cut), where[cut:]))
        pending = rest
        tables = [table, *(t for t, _ in take)]
        where = np.concatenate([at, *(w for _, w in take)])
        order = np.argsort(where, kind="stable")
        yield pa.concat_tables([t.select(table.column_names) for t in tables]).take(pa.array(order))
    for t, _ in pending:
        yield t
    for t, _ in b:
        yield t


def _groups(store: RecordStore, name: str, columns: list[str] | None = None) -> Iterator[pa.Table]:
    with store.fs.open(posixpath.join(store.root, name), "rb") as f:
        file = pq.ParquetFile(f)
        for group in range(file.num_row_groups):
            yield file.read_row_group(group, columns=columns)


def _column(store: RecordStore, name: str, column: str) -> pa.ChunkedArray:
    with store.fs.open(posixpath.join(store.root, name), "rb") as f:
        return pq.read_table(f, columns=[column])[column]
