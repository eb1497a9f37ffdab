"""The reference engine through the real synthesis code path on a tiny world: every seed gets the
known correct reversal as its dual view, guards included, without a model or Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dualview_core.config import PluginEngineConfig, SynthesisConfig
from tests.helpers.reference_engine import reference_config
from tests.helpers.world import WorldConfig, build_world, reference_instruction
from tasks.synthesis.driver import UNCHANGED, run_synthesis

pytestmark = pytest.mark.integration


def test_reference_engine_writes_the_known_reversals(tmp_path):
    world = build_world(WorldConfig(seed=1, seed_topics=6, eval_topics=2))
    files = world.write(tmp_path / "world")
    cfg = reference_config(files["world"])
    summary = run_synthesis(files["seeds"], str(tmp_path / "out"), cfg, progress=lambda _: None)
    assert summary["synthesis_seeds"] == 6 and summary["dual_views"] == 6 and summary["rejected"] == 0
    assert summary["model_id"] == "reference"
    views = pq.read_table(tmp_path / "out" / "dual_views.parquet").to_pylist()
    seeds = {r["query_id"]: r for r in world.seeds if r["has_instruction"]}
    for view in views:
        seed = seeds[view["query_id"]]
        assert view["positive"]["doc_id"] == seed["new_negatives"][0]["docid"]  # N* is the answer
        assert view["instruction_negatives"][0]["doc_id"] == seed["positive_passages"][0]["docid"]  # old positive first
        assert [p["doc_id"] for p in view["instruction_negatives"][1:]] == [p["docid"] for p in seed["new_negatives"][1:]]
        assert view["instruction"] == reference_instruction(world.metadata, view["query_id"], view["positive"]["doc_id"])
    again = run_synthesis(files["seeds"], str(tmp_path / "out"), cfg, progress=lambda _: None)
    assert again["plan"]["pending"] == 0 and again["dual_views"] == 6  # cached like any engine


def test_reference_engine_records_seeds_its_world_does_not_describe(tmp_path):
    files = build_world(WorldConfig(seed=1, seed_topics=5, eval_topics=2)).write(tmp_path / "a")
    other = build_world(WorldConfig(seed=2, seed_topics=5, eval_topics=2)).write(tmp_path / "b")
    cfg = reference_config(other["world"], max_error_runs=1)
    summary = run_synthesis(files["seeds"], str(tmp_path / "out"), cfg, progress=lambda _: None)
    assert summary["dual_views"] == 0 and summary["outcomes"]["by_reason"] == {"engine_error": 5}  # ids alike, queries not


def test_a_plugin_engine_without_a_factory_or_a_world_is_refused_with_one_line():
    from tasks.synthesis.engines import make_engine

    with pytest.raises(ValueError, match="plugin.factory"):
        make_engine(SynthesisConfig(engine="plugin"))
    with pytest.raises(ValueError, match="options.world"):
        make_engine(SynthesisConfig(engine="plugin", plugin=PluginEngineConfig(factory="tests.helpers.reference_engine:ReferenceEngine")))


def test_an_unchanged_rerun_rewrites_nothing_and_an_older_manifest_still_diffs(tmp_path):
    import json

    files = build_world(WorldConfig(seed=1, seed_topics=6, eval_topics=2)).write(tmp_path / "world")
    cfg = reference_config(files["world"])
    out = tmp_path / "out"
    first = run_synthesis(files["seeds"], str(out), cfg, progress=lambda _: None)
    written = (out / "dual_views.parquet").stat().st_mtime_ns
    lines: list[str] = []
    again = run_synthesis(files["seeds"], str(out), cfg, progress=lines.append)
    assert UNCHANGED in lines
    assert (out / "dual_views.parquet").stat().st_mtime_ns == written
    assert {k: again[k] for k in ("dual_views", "rejected", "outcomes")} == {k: first[k] for k in ("dual_views", "rejected", "outcomes")}
    assert again["plan"] == {"pending": 0, "cached": 6, "new": 0, "changed": 0, "removed": 0, "unchanged": 6}
    # the seed file rewritten with the same rows: read again, nothing to send, nothing rewritten
    stat = Path(files["seeds"]).stat()
    os.utime(files["seeds"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    lines.clear()
    touched = run_synthesis(files["seeds"], str(out), cfg, progress=lines.append)
    assert touched["plan"] == again["plan"] and touched["source_fingerprint"] != again["source_fingerprint"]
    assert UNCHANGED in lines and (out / "dual_views.parquet").stat().st_mtime_ns == written
    # a manifest from before the seed map moved to Parquet: its inline map is the previous run's seeds
    seeds = dict(zip(*pq.read_table(out / "seed_map.parquet").to_pydict().values()))
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({"seeds": seeds, "summary": {k: v for k, v in manifest["summary"].items()
                                                                              if k != "outputs_fingerprint"}}))
    (out / "seed_map.parquet").unlink()
    lines.clear()
    third = run_synthesis(files["seeds"], str(out), cfg, progress=lines.append)
    assert third["plan"] == {"pending": 0, "cached": 6, "new": 0, "changed": 0, "removed": 0, "unchanged": 6}
    assert UNCHANGED not in lines and (out / "dual_views.parquet").stat().st_mtime_ns != written
    assert third["dual_views"] == 6 and (out / "seed_map.parquet").exists()
