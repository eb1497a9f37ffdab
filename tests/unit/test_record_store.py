"""The record store's index and fetch: the record a key names, read from the shard that holds it."""

from __future__ import annotations

import json

from dualview_core.contracts import SYNTHESIS_RECORD
from tasks.record_store import RecordStore


def rec(key: str, rejection: str | None = None, raw: str = "r") -> dict:
    row = {f.name: None for f in SYNTHESIS_RECORD}
    return {**row, "cache_key": key, "seed_key": "s-" + key, "target_index": 0, "prompt_version": "p", "model_id": "m",
            "sampling_params": "{}", "raw_response": raw, "rejection": rejection, "attempts": 1}


def test_index_and_fetch_find_each_keys_record_and_skip_a_pending_failure(tmp_path):
    store = RecordStore(str(tmp_path))
    store.write_shard([rec("a", "engine_error", "timeout"), rec("b")])
    store.write_shard([rec("c", "off_topic"), rec("a", None, "second try")])
    index = store.index(max_error_runs=3)
    assert len(index) == 3 and "a" in index and "zz" not in index
    got = index.fetch(["c", "zz", "a", "b"])
    assert [r and (r["cache_key"], r["raw_response"]) for r in got] == [("c", "r"), None, ("a", "second try"), ("b", "r")]
    assert store.index(max_error_runs=1).fetch(["a"])[0]["raw_response"] == "second try"  # a final record wins


def test_previous_seed_map_reads_the_parquet_map_and_an_older_inline_one(tmp_path):
    import pyarrow as pa

    from dualview_core.cache_index import SEED_MAP

    store = RecordStore(str(tmp_path))
    assert store.previous_seed_map({}).num_rows == 0
    old = json.loads(json.dumps({"seeds": {"q1": "k1", "q2": "k2"}}))
    assert store.previous_seed_map(old).to_pydict() == {"query_id": ["q1", "q2"], "seed_key": ["k1", "k2"]}
    name = store.write_seed_map(pa.table({"query_id": ["q3"], "seed_key": ["k3"]}, schema=SEED_MAP))
    assert store.previous_seed_map({"seed_map": name}).to_pydict() == {"query_id": ["q3"], "seed_key": ["k3"]}


def tables(store: RecordStore) -> list:
    return [store.read_shard(f"{store.out}/records/{name}") for name in store.shard_names()]


def test_shard_writer_publishes_full_shards_as_rows_arrive_and_the_rest_on_close(tmp_path):
    from tasks.record_store import ShardWriter

    store = RecordStore(str(tmp_path))
    shards = ShardWriter(store, rows=3)
    shards.add([rec("a"), rec("b")])
    assert store.shard_names() == []  # a batch smaller than a shard waits
    shards.add([rec(k) for k in "cdefgh"])
    assert sorted(t.num_rows for t in tables(store)) == [3, 3]
    shards.close()
    sizes = sorted(t.num_rows for t in tables(store))
    keys = sorted(k for t in tables(store) for k in t.column("cache_key").to_pylist())
    assert sizes == [2, 3, 3] and keys == list("abcdefgh")
    shards.close()  # nothing left: no empty shard
    assert len(store.shard_names()) == 3


def test_shard_writer_takes_record_tables_in_any_sizes(tmp_path):
    import pyarrow as pa

    from dualview_core.contracts import SYNTHESIS_RECORD
    from tasks.record_store import ShardWriter

    store = RecordStore(str(tmp_path))
    shards = ShardWriter(store, rows=4)
    keys = [f"k{i}" for i in range(11)]
    for part in (keys[:1], keys[1:7], keys[7:7], keys[7:11]):  # 1, 6, 0 and 4 rows, as engine batches come
        shards.add(pa.Table.from_pylist([rec(k) for k in part], schema=SYNTHESIS_RECORD))
    assert sorted(t.num_rows for t in tables(store)) == [4, 4]
    shards.close()
    assert sorted(t.num_rows for t in tables(store)) == [3, 4, 4]
    assert sorted(k for t in tables(store) for k in t.column("cache_key").to_pylist()) == sorted(keys)
