"""The record store's index and fetch: the record a key names, read from the shard that holds it."""

from __future__ import annotations

import json

from dualview_core.contracts import SYNTHESIS_RECORD
from tasks.synthesis.record_store import RecordStore


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


def test_a_shard_names_its_run_and_the_index_counts_the_runs_a_call_failed_in(tmp_path):
    import doctest

    from tasks.synthesis import record_store
    from tasks.synthesis.record_store import new_run, shard_run

    assert doctest.testmod(record_store).failed == 0
    store = RecordStore(str(tmp_path))
    run = new_run()  # what a run names its shards with
    assert shard_run(store.write_shard([rec("z")], run=run)) == run != new_run()
    first = [store.write_shard([rec("a", "engine_error", "timeout 1"), rec("b")], run="0123456789abcdef"),
             store.write_shard([rec("a", "engine_error", "timeout 2")], run="0123456789abcdef")]
    assert [shard_run(name) for name in first] == ["0123456789abcdef"] * 2 and first[0] != first[1]
    assert "a" not in store.index(max_error_runs=2)  # two failures, one run: asked again
    store.write_shard([rec("a", "engine_error", "timeout 3")], run="fedcba9876543210")
    assert store.index(max_error_runs=2).fetch(["a"])[0]["raw_response"].startswith("timeout")


def test_previous_seed_map_reads_the_parquet_map_and_an_older_inline_one(tmp_path):
    import pyarrow as pa

    from dualview_core.synthesis.cache_index import SEED_MAP

    store = RecordStore(str(tmp_path))
    assert store.previous_seed_map({}).num_rows == 0
    old = json.loads(json.dumps({"seeds": {"q1": "k1", "q2": "k2"}}))
    assert store.previous_seed_map(old).to_pydict() == {"query_id": ["q1", "q2"], "seed_key": ["k1", "k2"]}
    name = store.write_seed_map(pa.table({"query_id": ["q3"], "seed_key": ["k3"]}, schema=SEED_MAP))
    assert store.previous_seed_map({"seed_map": name}).to_pydict() == {"query_id": ["q3"], "seed_key": ["k3"]}


def tables(store: RecordStore) -> list:
    return [store.read_shard(f"{store.out}/records/{name}") for name in store.shard_names()]


def test_a_shard_written_again_by_the_same_run_replaces_itself(tmp_path):
    """A task Ray runs again (its node died after the write) rewrites its shard, whatever the answers
    say this time; another run, or other keys, make another shard."""
    store = RecordStore(str(tmp_path))
    first = store.write_shard([rec("a"), rec("b")], run="r1")
    again = store.write_shard([rec("b", raw="asked again"), rec("a", raw="asked again")], run="r1")
    assert first == again and store.shard_names() == [first]
    assert tables(store)[0].column("raw_response").to_pylist() == ["asked again"] * 2
    other_run = store.write_shard([rec("a"), rec("b")], run="r2")
    other_keys = store.write_shard([rec("a")], run="r1")
    assert len({first, other_run, other_keys}) == 3 and len(store.shard_names()) == 3


def test_work_count_sees_files_written_after_a_listing_and_only_finished_parquet(tmp_path):
    store = RecordStore(str(tmp_path))
    assert store.work_count("plan") == 0  # no folder yet
    folder = tmp_path / ".work" / "plan"
    folder.mkdir(parents=True)
    (folder / "000000.parquet").write_bytes(b"x")
    assert store.work_count("plan") == 1
    (folder / "000001.parquet").write_bytes(b"x")
    (folder / ".000002.parquet.0123.tmp").write_bytes(b"x")  # a part still being written
    assert store.work_count("plan") == 2 == len(store.work_files("plan"))
