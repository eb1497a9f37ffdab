"""The synthesis cache's index: which record answers each cache key, found without reading records.

Built from two columns of the record shards (cache_key, rejection), in shard order, with the rule of
`synthesis.final_records`: a key is answered by its first final record, or, when it failed
transiently in `max_error_runs` runs and never succeeded, by its last failure. The index holds the
answered keys sorted, as fixed-width bytes, with each one's position (the record's ordinal over all
shards), so a lookup is a binary search and a million keys take tens of megabytes, not gigabytes.

Also owns the seed-map diff of a run (new, changed, removed, unchanged seeds) over Arrow tables of
(query_id, seed_key), so neither map becomes Python objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.parsing import Rejection

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


def build_index(columns: Iterable[pa.Table], max_error_runs: int) -> KeyIndex:
    """The index of record tables holding at least `cache_key` and `rejection`, given in shard order."""
    tables = [t.select(["cache_key", "rejection"]) for t in columns]
    if not tables or not sum(t.num_rows for t in tables):
        return KeyIndex(np.array([], dtype="S1"), np.array([], dtype=np.int64))
    table = pa.concat_tables(tables)
    position = pa.array(np.arange(table.num_rows, dtype=np.int64))
    transient = pc.fill_null(pc.equal(table["rejection"], Rejection.ENGINE_ERROR.value), False)
    table = pa.table({"cache_key": table["cache_key"], "position": position, "transient": transient})
    final = table.filter(pc.invert(transient)).group_by("cache_key").aggregate([("position", "min")])
    failed = (table.filter(transient).group_by("cache_key")
              .aggregate([("position", "max"), ("position", "count")]))
    given_up = failed.filter(pc.greater_equal(failed["position_count"], max_error_runs))
    given_up = given_up.filter(pc.invert(pc.is_in(given_up["cache_key"], value_set=final["cache_key"])))
    keys = pa.concat_arrays([final["cache_key"].combine_chunks(), given_up["cache_key"].combine_chunks()])
    positions = np.concatenate([final["position_min"].to_numpy(), given_up["position_max"].to_numpy()])
    return KeyIndex(_fixed_width(keys), positions.astype(np.int64))


def _fixed_width(keys: pa.Array) -> np.ndarray:
    values = keys.to_numpy(zero_copy_only=False)
    width = max((len(k) for k in values), default=1)
    return values.astype(f"S{max(width, 1)}")


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
