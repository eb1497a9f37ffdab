"""Reading through s3:// (a real S3-compatible server, moto's) gives exactly what disk gives."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

from dualview_core import sample
from dualview_core.contracts import DUAL_VIEW_ROW, QUARANTINE, SEED_ROW
from dualview_core.data.evalsets import load_eval_set
from dualview_core.storage.tables import read_table, write_table
from dualview_core.data.loading import read_seeds, stream_seeds
from flows.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(s3_options) -> tuple[s3fs.S3FileSystem, str]:
    fs = s3fs.S3FileSystem(**s3_options)
    name = f"seeds-{uuid.uuid4().hex[:8]}"
    fs.mkdir(name)
    return fs, name


def test_sample_seeds_from_s3_equal_disk(bucket, s3_options, tmp_path):
    fs, name = bucket
    local = read_seeds(sample.seeds_path())
    fs.put(sample.seeds_path(), f"{name}/raw/seeds.jsonl")
    parquet = tmp_path / "seeds.parquet"
    pq.write_table(_as_published_parquet(), parquet)
    fs.put(str(parquet), f"{name}/raw/seeds.parquet")
    from_jsonl = read_seeds(f"s3://{name}/raw/seeds.jsonl", s3_options)
    from_parquet = read_seeds(f"s3://{name}/raw/seeds.parquet", s3_options)
    assert local.report.valid >= 120
    assert from_jsonl.seeds.to_pylist() == local.seeds.to_pylist()
    assert from_parquet.seeds.column("seed_key").to_pylist() == local.seeds.column("seed_key").to_pylist()
    assert from_jsonl.report.as_dict() == local.report.as_dict()


def _as_published_parquet() -> pa.Table:
    with open(sample.seeds_path(), encoding="utf-8") as f:
        return pa.Table.from_pylist([json.loads(line) for line in f if line.strip()])


def test_quarantine_and_outputs_are_written_to_s3(bucket, s3_options, tmp_path):
    fs, name = bucket
    broken = tmp_path / "broken.jsonl"
    broken.write_text(open(sample.seeds_path(), encoding="utf-8").read() + "{not json\n", encoding="utf-8")
    fs.put(str(broken), f"{name}/broken.jsonl")
    batches, validator = stream_seeds(f"s3://{name}/broken.jsonl", s3_options, quarantine_path=f"s3://{name}/out/quarantine.parquet")
    valid = sum(t.num_rows for t in batches)
    assert validator.report.quarantined == 1 and validator.report.rows == valid + 1
    q = read_table(f"s3://{name}/out/quarantine.parquet", QUARANTINE, s3_options)
    assert q.column("reason").to_pylist() == ["malformed_record"]
    seeds = read_seeds(sample.seeds_path()).seeds
    write_table(f"s3://{name}/out/seeds.parquet", seeds, SEED_ROW, s3_options)
    assert read_table(f"s3://{name}/out/seeds.parquet", SEED_ROW, s3_options).equals(seeds)
    assert not [p for p in fs.ls(f"{name}/out") if p.endswith(".tmp")]


def test_listings_on_s3_see_files_another_client_wrote_after_a_cached_listing(bucket, s3_options):
    from tasks.synthesis.record_store import RecordStore

    _, name = bucket
    store = RecordStore(f"s3://{name}/counted", s3_options)
    worker = s3fs.S3FileSystem(skip_instance_cache=True, **s3_options)  # another process's client
    assert store.work_count("plan") == 0  # no folder yet
    worker.pipe(f"{name}/counted/.work/plan/000000.parquet", b"x")
    assert store.work_count("plan") == 1
    assert len(store.fs.ls(store.work("plan"), detail=False)) == 1  # the store's filesystem caches this listing
    worker.pipe(f"{name}/counted/.work/plan/000001.parquet", b"x")
    worker.pipe(f"{name}/counted/.work/plan/.000002.parquet.tmp", b"x")  # a write in flight
    assert store.work_count("plan") == 2
    assert [p.rsplit("/", 1)[1] for p in store.work_files("plan")] == ["000000.parquet", "000001.parquet"]

    assert store.shard_names() == []
    worker.pipe(f"{name}/counted/records/part-b.parquet", b"x")  # a Ray worker publishes shards
    assert store.shard_names() == ["part-b.parquet"]
    assert len(store.fs.ls(f"{name}/counted/records", detail=False)) == 1  # cached
    worker.pipe(f"{name}/counted/records/part-a.parquet", b"x")
    worker.pipe(f"{name}/counted/records/.part-c.parquet.tmp", b"x")
    assert store.shard_names() == ["part-a.parquet", "part-b.parquet"]


def test_eval_set_from_s3_equals_disk(bucket, s3_options):
    fs, name = bucket
    fs.put(sample.followir_path(), f"{name}/followir", recursive=True)
    local = load_eval_set(sample.followir_path()).eval_set
    remote = load_eval_set(f"s3://{name}/followir", storage_options=s3_options).eval_set
    for table in ("corpus", "queries", "qrels"):
        assert getattr(remote, table).equals(getattr(local, table)), table
    assert remote.candidates() == local.candidates()


def test_cli_reads_s3_with_endpoint_flag(bucket, s3_server, capsys):
    fs, name = bucket
    fs.put(sample.seeds_path(), f"{name}/seeds.jsonl")
    assert main(["seeds", "check", f"s3://{name}/seeds.jsonl", "--endpoint-url", s3_server]) == 0
    assert '"quarantined": 0' in capsys.readouterr().out
    assert main(["seeds", "check", f"s3://{name}/missing.jsonl", "--endpoint-url", s3_server]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_synthesis_writes_its_cache_and_tables_to_s3_and_an_unchanged_rerun_stands(bucket, s3_options, tmp_path):
    from tests.helpers.reference_engine import reference_config
    from tests.helpers.world import WorldConfig, build_world
    from tasks.synthesis.driver import run_synthesis

    fs, name = bucket
    files = build_world(WorldConfig(seed=1, seed_topics=6, eval_topics=2)).write(tmp_path / "world")
    cfg = reference_config(files["world"], shard_rows=4)
    out = f"s3://{name}/syn"
    first = run_synthesis(files["seeds"], out, cfg, progress=lambda _: None, out_storage_options=s3_options)
    assert first["dual_views"] == 6 and len(fs.glob(f"{name}/syn/records/part-*.parquet")) == 2  # 4 + 2 rows
    assert read_table(f"{out}/dual_views.parquet", DUAL_VIEW_ROW, s3_options).num_rows == 6
    assert fs.exists(f"{name}/syn/seed_map.parquet") and "seeds" not in json.loads(fs.cat_file(f"{name}/syn/manifest.json"))
    lines: list[str] = []
    again = run_synthesis(files["seeds"], out, cfg, progress=lines.append, out_storage_options=s3_options)
    assert again["plan"]["pending"] == 0 and again["plan"]["unchanged"] == 6 and again["dual_views"] == 6
    assert any("no change since the last run" in m for m in lines), lines
    assert not [p for p in fs.find(f"{name}/syn") if p.endswith(".tmp") or "/.work" in p]
    # one seed edited: the others' rows kept from the bucket's files, as a full derive on disk writes them
    rows = [json.loads(line) for line in Path(files["seeds"]).read_text().splitlines()]
    edited = next(r for r in rows if r["has_instruction"] and r.get("new_negatives"))
    edited["only_instruction"] += " Only recent passages count."
    seeds = tmp_path / "edited.jsonl"
    seeds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines.clear()
    patched = run_synthesis(str(seeds), out, cfg, progress=lines.append, out_storage_options=s3_options)
    assert any("unchanged seeds kept" in m for m in lines), lines
    full = run_synthesis(str(seeds), str(tmp_path / "full"), cfg, progress=lambda _: None)
    assert read_table(f"{out}/dual_views.parquet", DUAL_VIEW_ROW, s3_options) == \
        read_table(str(tmp_path / "full" / "dual_views.parquet"), DUAL_VIEW_ROW)
    assert patched["outcomes"] == full["outcomes"]
