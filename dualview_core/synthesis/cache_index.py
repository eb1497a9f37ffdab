"""The synthesis cache's index: which record answers each cache key, found without reading records.

Built from two columns of the record shards (cache_key, rejection), in shard order, with the rule of
`synthesis.final_records`: a key is answered by its first final record, or, when it failed
transiently in `max_error_runs` runs and never succeeded, by its last failure. Runs, not failure
records, are counted: one run can leave two failures of a key (a streamed run sends a seed whose id
and content repeat a row of an earlier chunk), and that is one try of the engine, not two. The index holds the
answered keys sorted, as fixed-width bytes, with each one's position (the record's ordinal over all
shards), so a lookup is a binary search and a million keys take tens of megabytes, not gigabytes.

Also owns the seed-map diff of a run (new, changed, removed, unchanged seeds) over Arrow tables of
(query_id, seed_key), so neither map becomes Python objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.method.parsing import Rejection

SEED_MAP = pa.schema([("query_id", pa.string()), ("seed_key", pa.string())])


class KeyIndex:
    """Sorted answered keys and the position of the record that answers each."""

    def __init__(self, keys: np.ndarray, positions: np.ndarray):
        order = np.argsort(keys, kind="stable")
        self.keys, self.positions = keys[order], positions[order]

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, keys: Sequence[str]) -> np.ndarray:
        """The position of each key's record, or -1 where the key is not answered."""
        if not len(keys) or not len(self.keys):
            return np.full(len(keys), -1, dtype=np.int64)
        wanted = np.asarray([k.encode() for k in keys], dtype="S")  # its own width: a longer key never matches
        at = np.searchsorted(self.keys, wanted)
        at_clipped = np.minimum(at, len(self.keys) - 1)
        found = (at < len(self.keys)) & (self.keys[at_clipped] == wanted)
        return np.where(found, self.positions[at_clipped], -1)

    def __contains__(self, key: str) -> bool:
        return bool(self.lookup([key])[0] >= 0)


def build_index(columns: Iterable[pa.Table], max_error_runs: int, runs: Iterable[str | None] | None = None) -> KeyIndex:
    """The index of record tables holding at least `cache_key` and `rejection`, given in shard order,
    with the run that wrote each (`runs`, one per table; None where unknown: each of that table's
    failures then counts as a run of its own). Sorted in NumPy, on fixed-width keys: Arrow's hash
    aggregation needs well over twice the memory on the way (benchmarks/README.md, synthesis_scale.py)."""
    tagged = [(t.select(["cache_key", "rejection"]), run)
              for t, run in zip(columns, runs if runs is not None else repeat(None)) if t.num_rows]
    if not tagged:
        return KeyIndex(np.array([], dtype="S1"), np.array([], dtype=np.int64))
    keys = np.concatenate([fixed_width(t["cache_key"]) for t, _ in tagged])
    transient = np.concatenate([pc.fill_null(pc.equal(t["rejection"], Rejection.ENGINE_ERROR.value), False)
                                .to_numpy(zero_copy_only=False) for t, _ in tagged])
    positions = np.arange(len(keys), dtype=np.int64)
    final_keys, final_at, _, _ = _groups(keys[~transient], positions[~transient])
    failed_keys, _, failed_last, _ = _groups(keys[transient], positions[transient])
    failed_runs = _runs_per_key(keys[transient], _run_codes(tagged)[transient])
    given_up = (failed_runs >= max_error_runs) & ~np.isin(failed_keys, final_keys)
    return KeyIndex(np.concatenate([final_keys, failed_keys[given_up]]),
                    np.concatenate([final_at, failed_last[given_up]]))


def _run_codes(tagged: list[tuple[pa.Table, str | None]]) -> np.ndarray:
    """A number for each record's run: the same for records of one known run, a distinct negative
    one for every record whose run is unknown."""
    codes: dict[str, int] = {}
    out, at = [], 0
    for table, run in tagged:
        n = table.num_rows
        if run is None:
            out.append(-1 - np.arange(at, at + n, dtype=np.int64))
        else:
            out.append(np.full(n, codes.setdefault(run, len(codes)), dtype=np.int64))
        at += n
    return np.concatenate(out)


def _runs_per_key(keys: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """For each distinct key (sorted, as `_groups` gives them), how many distinct runs it occurs in.

        >>> _runs_per_key(np.array([b"b", b"a", b"b", b"b"]), np.array([1, 2, 1, 3])).tolist()
        [1, 2]
    """
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((runs, keys))
    keys, runs = keys[order], runs[order]
    new_key = np.r_[True, keys[1:] != keys[:-1]]
    new_pair = new_key | np.r_[True, runs[1:] != runs[:-1]]
    return np.add.reduceat(new_pair.astype(np.int64), np.flatnonzero(new_key))


def _groups(keys: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, ...]:
    """The distinct keys (sorted) with the first and last position of each and how many times it
    occurs; `positions` ascend.

        >>> keys, first, last, count = _groups(np.array([b"b", b"a", b"b"]), np.array([0, 1, 2]))
        >>> keys.tolist(), first.tolist(), last.tolist(), count.tolist()
        ([b'a', b'b'], [1, 0], [1, 2], [1, 2])
    """
    if not len(keys):
        return keys, positions, positions, positions
    order = np.argsort(keys, kind="stable")  # stable: a key's positions stay ascending
    keys, positions = keys[order], positions[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)].astype(np.int64)
    return keys[starts], positions[starts], positions[ends - 1], ends - starts


def fixed_width(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """String keys as NumPy fixed-width bytes (keys never hold a NUL byte). Keys of one length (every
    cache key is 32 hex characters) are copied straight from Arrow's data buffer: a million keys as
    Python strings first would cost ~90 MB on the way, and most of it stays with the allocator.

        >>> fixed_width(pa.array(["ab", "cd"])).tolist(), fixed_width(pa.array(["a", "bcd"])).tolist()
        ([b'ab', b'cd'], [b'a', b'bcd'])
    """
    array = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if not len(array):
        return np.empty(0, dtype="S1")
    array = array.cast(pa.large_string()) if array.type == pa.string() else array
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64, count=len(array) + 1 + array.offset)[array.offset:]
    lengths = np.diff(offsets)
    width = int(lengths.max())
    if array.null_count == 0 and width > 0 and (lengths == width).all():
        data = np.frombuffer(array.buffers()[2], dtype=np.uint8, count=int(offsets[-1]))[int(offsets[0]):]
        return data.view(f"S{width}").copy()
    return array.to_numpy(zero_copy_only=False).astype(f"S{max(width, 1)}")


def seed_diff(previous: pa.Table, current: pa.Table) -> dict[str, int]:
    """new / changed / unchanged (current seeds against `previous`) and removed (gone since) counts,
    over SEED_MAP tables; a query_id is counted once (its last row, as a dict would keep it)."""
    previous, current = unique_seeds(previous), unique_seeds(current)
    joined = current.join(previous, keys="query_id", join_type="left outer", right_suffix="_before")
    before = joined["seed_key_before"]
    new = pc.sum(pc.is_null(before)).as_py() or 0
    same = pc.sum(pc.fill_null(pc.equal(joined["seed_key"], before), False)).as_py() or 0
    removed = previous.num_rows - (pc.sum(pc.is_in(previous["query_id"], value_set=current["query_id"])).as_py() or 0)
    return {"new": new, "changed": current.num_rows - new - same, "removed": removed, "unchanged": same}


def unique_seeds(table: pa.Table) -> pa.Table:
    """A SEED_MAP table with each query_id once: its last row, in the order of those rows."""
    table = table.select(["query_id", "seed_key"])
    if not table.num_rows:
        return SEED_MAP.empty_table()
    indexed = table.append_column("i", pa.array(np.arange(table.num_rows)))
    last = indexed.group_by("query_id").aggregate([("i", "max")])
    return table.take(pa.array(np.sort(last["i_max"].to_numpy())))
