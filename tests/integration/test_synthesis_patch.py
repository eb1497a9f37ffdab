"""A run that changed a few seeds keeps the last run's rows of the others (tasks/synthesis/patching.py)
and writes exactly what deriving everything writes: the same dual views and rejections in the same
order, and the same report.md. Where it may not keep them (the source reordered, other settings,
shards the last run did not leave), it derives everything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tasks.synthesis.driver import run_synthesis
from tests.helpers.factories import write_jsonl
from tests.helpers.reference_engine import reference_config
from tests.helpers.world import WorldConfig, build_world

pytestmark = pytest.mark.integration

MIXED = "tests.helpers.reference_engine:MixedEngine"
KEPT = "unchanged seeds kept"


def mixed_config(world: str, **synthesis):
    cfg = reference_config(world, **synthesis)
    return cfg.model_copy(update={"plugin": cfg.plugin.model_copy(update={"factory": MIXED})})


def run(seeds: Path, out: Path, cfg) -> tuple[dict, list[str]]:
    lines: list[str] = []
    return run_synthesis(str(seeds), str(out), cfg, progress=lines.append), lines


def derived(out: Path) -> tuple[list[dict], list[dict], str]:
    return (pq.read_table(out / "dual_views.parquet").to_pylist(), pq.read_table(out / "rejections.parquet").to_pylist(),
            (out / "report.md").read_text())


def without_tallies(out: Path) -> None:
    """The manifest as a run before this feature wrote it: such a run derives everything."""
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["summary"].pop("tallies")
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A world's seeds synthesized once with every outcome (accepted, rejected, engine errors given up)."""
    root = tmp_path_factory.mktemp("patch")
    world = build_world(WorldConfig(seed=3, seed_topics=24, eval_topics=2))
    files = world.write(root / "world")
    cfg = mixed_config(files["world"], max_error_runs=1)
    out = root / "out"
    summary, _ = run(Path(files["seeds"]), out, cfg)
    reasons = summary["outcomes"]["by_reason"]
    assert summary["dual_views"] and {"engine_error", "no_answer", "chatter"} <= set(reasons), reasons
    return root, world.seeds, cfg, out


def edited(rows: list[dict]) -> list[dict]:
    """Two instructions rewritten, one seed removed, one added (unknown to the world: an engine error)."""
    rows = [dict(r) for r in rows]
    instruct = [i for i, r in enumerate(rows) if r["has_instruction"] and r.get("new_negatives")]
    for i in instruct[1:3]:
        rows[i]["only_instruction"] += " Only passages from after 2001 count."
    del rows[instruct[5]]
    extra = dict(rows[instruct[0]], query_id="added-1")
    return rows + [extra]


def compare(first, rows: list[dict], cfg=None, prepare=None) -> tuple[list[str], dict]:
    """The run over `rows` on a copy of the first output, and on another copy made to derive
    everything; both must write the same files. The first copy's progress lines and summary."""
    root, _, base_cfg, out = first
    cfg = cfg or base_cfg
    tag = str(len(list(root.glob("case-*"))))
    seeds = write_jsonl(root / f"case-{tag}.jsonl", rows)
    patched, full = root / f"case-{tag}" / "patched", root / f"case-{tag}" / "full"
    shutil.copytree(out, patched)
    shutil.copytree(out, full)
    without_tallies(full)
    if prepare:
        prepare(patched)
    summary, lines = run(seeds, patched, cfg)
    expected, full_lines = run(seeds, full, cfg)
    assert not any(KEPT in line for line in full_lines)
    assert derived(patched) == derived(full)
    assert {k: summary[k] for k in ("dual_views", "rejected", "outcomes", "tallies")} == \
        {k: expected[k] for k in ("dual_views", "rejected", "outcomes", "tallies")}
    return lines, summary


def test_a_few_changed_seeds_keep_the_rest_and_write_what_a_full_derive_writes(first):
    _, rows, _, _ = first
    lines, summary = compare(first, edited(rows))
    kept = [line for line in lines if KEPT in line]
    assert kept and summary["plan"]["changed"] == 2 and summary["plan"]["new"] == 1 and summary["plan"]["removed"] == 1
    seeds = summary["synthesis_seeds"]
    assert kept[0] == f"synthesis: the last run's rows of {seeds - 3} unchanged seeds kept, 3 seeds derived " \
        "(read from the first pass's copies in 1 of 1 chunks)"  # the full derive read them from the source
    # and once more on that output: nothing changed, nothing derived
    root, _, cfg, _ = first
    again, lines = run(root / "case-0.jsonl", root / "case-0" / "patched", cfg)
    assert again["plan"]["pending"] == 0 and not any(KEPT in line for line in lines)


def test_a_reordered_source_derives_everything(first):
    _, rows, _, _ = first
    lines, _ = compare(first, list(reversed(edited(rows))))
    assert not any(KEPT in line for line in lines)


def test_other_filtering_derives_everything(first):
    _, rows, cfg, _ = first
    lines, summary = compare(first, edited(rows), cfg=cfg.model_copy(update={"filtering": "none"}))
    assert not any(KEPT in line for line in lines) and summary["filtering"] == "none"


def test_a_shard_the_last_run_did_not_leave_derives_everything(first):
    _, rows, _, _ = first

    def killed_run_published(out: Path) -> None:  # a shard published after the last run's manifest
        shard = sorted((out / "records").glob("*.parquet"))[0]
        shutil.copy(shard, shard.with_name("part-0000killed.parquet"))

    lines, _ = compare(first, edited(rows), prepare=killed_run_published)
    assert not any(KEPT in line for line in lines)


def test_changed_engine_errors_are_asked_again_and_not_kept(first):
    """With retries left, last run's engine errors are asked again: those seeds are derived anew."""
    _, rows, cfg, _ = first
    lines, summary = compare(first, edited(rows), cfg=cfg.model_copy(update={"max_error_runs": 3}))
    assert summary["plan"]["pending"] > 3 and any(KEPT in line for line in lines)
