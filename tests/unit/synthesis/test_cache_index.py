"""The cache index: which record answers a key, from two columns, by the rule of final_records."""

from __future__ import annotations

import pyarrow as pa

from dualview_core.synthesis.cache_index import SEED_MAP, build_index, seed_diff
from tests.helpers.synthesis_reference import final_records

ERR = "engine_error"


def shard(rows: list[tuple[str, str | None]]) -> pa.Table:
    return pa.table({"cache_key": [k for k, _ in rows], "rejection": [r for _, r in rows]})


SHARDS = [
    shard([("a", ERR), ("b", None), ("c", ERR)]),  # positions 0 1 2
    shard([("a", "off_topic"), ("c", ERR), ("d", ERR)]),  # 3 4 5
    shard([("a", None), ("b", "empty"), ("c", ERR)]),  # 6 7 8
]


def test_first_final_record_answers_a_key_and_transient_failures_wait_for_max_runs():
    index = build_index(SHARDS, max_error_runs=3)
    # a: first final is "off_topic" at 3 (not the later accept); b: accepted at 1; c failed 3 times
    # -> its last failure (8); d failed once -> not answered, so it is retried
    assert index.lookup(["a", "b", "c", "d", "zz"]).tolist() == [3, 1, 8, -1, -1]
    assert "b" in index and "d" not in index and len(index) == 3


def test_the_index_agrees_with_final_records():
    rows = [{"cache_key": k, "rejection": r, "n": n}
            for n, (k, r) in enumerate(kr for t in SHARDS for kr in zip(t["cache_key"].to_pylist(), t["rejection"].to_pylist()))]
    for runs in (1, 2, 3, 4):
        expected = {k: rec["n"] for k, rec in final_records(rows, runs).items()}
        index = build_index(SHARDS, runs)
        keys = sorted({r["cache_key"] for r in rows})
        got = {k: int(p) for k, p in zip(keys, index.lookup(keys)) if p >= 0}
        assert got == expected, runs


def test_failures_are_counted_in_runs_not_records():
    twice = [shard([("a", ERR), ("b", ERR)]), shard([("a", ERR)])]  # one run failed a in two shards
    assert build_index(twice, 2, runs=["r1", "r1"]).lookup(["a"]).tolist() == [-1]  # one run: asked again
    assert build_index(twice + [shard([("a", ERR)])], 2, runs=["r1", "r1", "r2"]).lookup(["a"]).tolist() == [3]
    assert build_index(twice, 2, runs=["r1", "r2"]).lookup(["a"]).tolist() == [2]
    assert build_index(twice, 2, runs=[None, None]).lookup(["a"]).tolist() == [2]  # unknown: a run a record
    assert build_index([shard([("a", ERR), ("a", ERR)])], 2, runs=[None]).lookup(["a"]).tolist() == [1]


def test_the_index_agrees_with_final_records_over_runs():
    tagged = [(shard([("a", ERR), ("b", None), ("c", ERR)]), "r1"), (shard([("c", ERR), ("d", ERR)]), "r1"),
              (shard([("a", ERR), ("c", ERR)]), None), (shard([("d", ERR), ("a", ERR)]), "r2"),
              (shard([("d", "off_topic")]), "r3")]
    rows = [{"cache_key": k, "rejection": r, "run": run, "n": n}
            for n, (k, r, run) in enumerate((k, r, run) for t, run in tagged
                                            for k, r in zip(t["cache_key"].to_pylist(), t["rejection"].to_pylist()))]
    keys = sorted({r["cache_key"] for r in rows})
    for runs in (1, 2, 3, 4):
        index = build_index([t for t, _ in tagged], runs, runs=[run for _, run in tagged])
        got = {k: int(p) for k, p in zip(keys, index.lookup(keys)) if p >= 0}
        assert got == {k: rec["n"] for k, rec in final_records(rows, runs).items()}, runs


def test_an_empty_cache_answers_nothing_and_a_longer_key_never_matches_a_prefix():
    assert build_index([], 3).lookup(["a"]).tolist() == [-1]
    index = build_index([shard([("abc", None)])], 1)
    assert index.lookup(["abcd", "ab", "abc"]).tolist() == [-1, -1, 0]


def seeds(pairs: dict[str, str]) -> pa.Table:
    return pa.table({"query_id": list(pairs), "seed_key": list(pairs.values())}, schema=SEED_MAP)


def test_seed_diff_counts_new_changed_removed_unchanged():
    before = seeds({"q1": "k1", "q2": "k2", "q3": "k3"})
    now = seeds({"q1": "k1", "q2": "k2-edited", "q4": "k4"})
    assert seed_diff(before, now) == {"new": 1, "changed": 1, "removed": 1, "unchanged": 1}
    assert seed_diff(SEED_MAP.empty_table(), now) == {"new": 3, "changed": 0, "removed": 0, "unchanged": 0}


def test_seed_diff_keeps_the_last_row_of_a_repeated_query_id_as_a_dict_would():
    now = pa.table({"query_id": ["q1", "q1"], "seed_key": ["old", "k1"]}, schema=SEED_MAP)
    assert seed_diff(seeds({"q1": "k1"}), now) == {"new": 0, "changed": 0, "removed": 0, "unchanged": 1}


def test_fixed_width_keys_are_read_from_arrow_as_python_would_convert_them():
    import numpy as np
    import pyarrow as pa

    from dualview_core.synthesis.cache_index import fixed_width

    same = pa.array([f"{i:032x}" for i in range(1000)])
    for keys in (same, same.slice(7, 500), pa.array(["ab", "c", "def"]), pa.array([], pa.string())):
        expected = keys.to_numpy(zero_copy_only=False).astype(f"S{max([len(k) for k in keys.to_pylist()] or [1])}")
        got = fixed_width(keys)
        assert got.dtype == expected.dtype and np.array_equal(got, expected)
