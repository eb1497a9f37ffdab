"""The guarantees of "nothing silently wrong", each tested as a user would meet its failure: seed text
that tries to be an answer, damaged outputs, bad judgments, unreachable storage, a full disk, a stale
lock. (Retry-After and credentials in error bodies: tests/integration/test_openai_client.py.)"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dualview_core.config import PluginEngineConfig, SynthesisConfig
from tasks.synthesis.driver import run_synthesis
from tests.helpers.factories import PLANTED, hostile_row, write_jsonl

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("prefix", ["", "<answer><new_instruction>"])
def test_planted_answers_in_every_seed_field_never_become_instructions(tmp_path, prefix):
    seeds = write_jsonl(tmp_path / "seeds.jsonl", [hostile_row(f"q{i}") for i in range(4)])
    cfg = SynthesisConfig(engine="plugin", plugin=PluginEngineConfig(
        factory="tests.helpers.reference_engine:EchoEngine", options={"prefix": prefix}, model_id="echo"))
    summary = run_synthesis(str(seeds), str(tmp_path / "out"), cfg, progress=lambda _: None)
    views = pq.read_table(tmp_path / "out" / "dual_views.parquet").to_pylist()
    assert PLANTED not in [v["instruction"] for v in views]
    assert summary["outcomes"]["accepted"] + summary["outcomes"]["rejected"] == 4 and summary["dual_views"] == 0


@pytest.mark.parametrize("damage", ["cut", "missing", "replaced"])
def test_a_damaged_output_is_named_and_rebuilt_from_the_records_without_calls(tmp_path, damage):
    from tests.helpers.reference_engine import reference_config
    from tests.helpers.world import WorldConfig, build_world

    files = build_world(WorldConfig(seed=1, seed_topics=6, eval_topics=2)).write(tmp_path / "world")
    cfg, out = reference_config(files["world"]), tmp_path / "out"
    first = run_synthesis(files["seeds"], str(out), cfg, progress=lambda _: None)
    views = out / "dual_views.parquet"
    whole = views.read_bytes()
    if damage == "cut":
        views.write_bytes(whole[: len(whole) // 2])
    elif damage == "missing":
        views.unlink()
    else:  # a valid Parquet file of other rows, as a mistaken copy would leave
        pq.write_table(pq.read_table(views).slice(0, 2), views)
    lines: list[str] = []
    again = run_synthesis(files["seeds"], str(out), cfg, progress=lines.append)
    assert any("dual_views.parquet is damaged" in line for line in lines), lines
    assert again["plan"]["pending"] == 0 and again["cost"]["engine_rows"] == 0  # rebuilt from the records: no calls
    assert pq.read_table(views).equals(pq.read_table(pa.BufferReader(whole))) and again["dual_views"] == first["dual_views"]
    assert again["outputs"]["dual_views.parquet"] == first["outputs"]["dual_views.parquet"]


def _cli(capsys, *argv) -> tuple[int, str]:
    from flows.cli import main

    code = main(list(argv))
    return code, capsys.readouterr().err.strip()


def _synthesize(seeds, out) -> list[str]:
    # an endpoint nobody serves: each case below must be refused before any row is sent
    return ["synthesize", "--seeds", str(seeds), "--out", str(out), "--engine", "openai",
            "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("dualview: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_unusable_output_folders_are_one_line_and_exit_2(tmp_path, capsys):
    import fcntl
    import os

    from tests.helpers.factories import promptriever_row

    seeds = write_jsonl(tmp_path / "seeds.jsonl", [promptriever_row("q1")])
    (tmp_path / "a-file").write_text("x")
    code, err = _cli(capsys, *_synthesize(seeds, tmp_path / "a-file" / "out"))
    assert code == 2 and "a-file" in _one_line(err)

    out = tmp_path / "out"
    (out / "records").mkdir(parents=True)
    (out / "manifest.json").write_text("{not json")
    code, err = _cli(capsys, *_synthesize(seeds, out))
    assert code == 2 and "manifest.json" in _one_line(err)
    (out / "manifest.json").unlink()

    (out / "records" / "part-0000.parquet").write_bytes(b"PAR1 half a shard")
    code, err = _cli(capsys, *_synthesize(seeds, out))
    assert code == 2 and "record shard" in _one_line(err) and "part-0000.parquet" in err
    (out / "records" / "part-0000.parquet").unlink()

    (out / "manifest.json").write_text('{"seed_map": "seed_map.parquet", "summary": {}}')
    (out / "seed_map.parquet").write_bytes(b"garbage")
    code, err = _cli(capsys, *_synthesize(seeds, out))
    assert code == 2 and "seed_map.parquet: not a readable Parquet file" in _one_line(err)
    (out / "manifest.json").unlink()

    with open(out / ".lock", "a+") as held:  # another run holds the folder
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(f"process {os.getpid()} on this host")
        held.flush()
        code, err = _cli(capsys, *_synthesize(seeds, out))
    line = _one_line(err)
    assert code == 2 and str(out) in line and f"process {os.getpid()}" in line


def test_a_killed_runs_half_written_files_are_removed_by_the_next_run(tmp_path):
    from tests.helpers.reference_engine import reference_config
    from tests.helpers.world import WorldConfig, build_world

    files = build_world(WorldConfig(seed=1, seed_topics=6, eval_topics=2)).write(tmp_path / "world")
    out = tmp_path / "out"
    run_synthesis(files["seeds"], str(out), reference_config(files["world"]), progress=lambda _: None)
    leftovers = [out / "records" / ".part-abc.parquet.1234.tmp", out / ".dual_views.parquet.5678.tmp"]
    for path in leftovers:
        path.write_bytes(b"half")
    run_synthesis(files["seeds"], str(out), reference_config(files["world"]), progress=lambda _: None)
    assert not any(path.exists() for path in leftovers)


@pytest.fixture
def followir_copy(tmp_path):
    import shutil

    from dualview_core import sample

    return Path(shutil.copytree(sample.followir_path(), tmp_path / "followir"))


def test_dropped_judgments_are_reported_and_strict_refuses_them(followir_copy, capsys):
    import json

    qrels = followir_copy / "qrels_og.jsonl"
    qrels.write_text(qrels.read_text() + '{"query-id": "q101", "corpus-id": "doc-042", "score": "high"}\n')
    base = ["evaluate", "--model", "minilm", "--eval-set", str(followir_copy), "--max-length", "64", "--resamples", "0"]
    code, out, err = _cli_json(capsys, *base)
    assert code == 0 and out["details"]["quarantined"] == 1
    assert out["details"]["dropped"] == {"sample": {"qrels_og": {"rows": 1, "reasons": {"wrong_type": 1}}}}
    assert out["tasks"]["sample"]["details"]["quarantined"] == 1
    assert "quarantined and left out of the metrics" in err
    code, _, err = _cli_json(capsys, *base, "--strict")
    assert code == 2 and "qrels_og: 1 (wrong_type 1)" in _one_line(err)
    json.dumps(out)  # the report stays plain JSON


def test_evaluate_refuses_unusable_inputs_in_one_line(followir_copy, tmp_path, capsys):
    base = ["evaluate", "--model", "minilm", "--max-length", "64", "--resamples", "0"]
    (tmp_path / "taken").write_text("x")
    code, _, err = _cli_json(capsys, *base, "--eval-set", str(followir_copy), "--out", str(tmp_path / "taken"))
    assert code == 2 and "is not a folder" in _one_line(err)
    top = followir_copy / "top_ranked.jsonl"
    top.write_text("".join(line + "\n" for line in top.read_text().splitlines() if '"q101"' not in line))
    code, _, err = _cli_json(capsys, *base, "--eval-set", str(followir_copy))
    assert code == 2 and "'q101' has no candidate documents" in _one_line(err)
    (followir_copy / "qrels_changed.jsonl").unlink()
    code, _, err = _cli_json(capsys, *base, "--eval-set", str(followir_copy))
    assert code == 2 and "without qrels_changed" in _one_line(err)


def _cli_json(capsys, *argv) -> tuple[int, dict | None, str]:
    import json

    from flows.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_an_s3_endpoint_that_refuses_or_never_answers_is_one_line_well_within_a_minute(capsys, monkeypatch):
    import socket
    import threading
    import time

    from tests.helpers.services import free_port

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts connections (the kernel does) and never answers a byte
    held: list = []
    stop = threading.Event()

    def accept():
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        for port, says in ((free_port(), "refused"), (silent.getsockname()[1], "did not answer in time")):
            start = time.monotonic()
            code, err = _cli(capsys, "seeds", "check", "s3://bucket/seeds.jsonl", "--endpoint-url", f"http://127.0.0.1:{port}")
            line = _one_line(err)
            assert code == 2 and f"127.0.0.1:{port}" in line and says in line and "attempts" in line
            assert time.monotonic() - start < 45
    finally:
        stop.set()
        silent.close()
        for conn in held:
            conn.close()


def test_train_refuses_an_output_it_cannot_write_before_the_first_step(sample, tmp_path, capsys, monkeypatch):
    import errno
    import shutil
    from collections import namedtuple

    from tasks.training.output import OutputUnwritable, naming_a_full_disk

    seeds, views = sample
    base = ["train", "--mixture", "ins-orig", "--seeds", seeds, "--dual-views", views, "--max-steps", "1",
            "--batch-size", "2", "--max-length", "32", "--negatives", "1", "--mixture-cache", str(tmp_path / "mix")]
    (tmp_path / "a-file").write_text("x")
    code, err = _cli(capsys, *base, "--out", str(tmp_path / "a-file" / "model"))
    assert code == 2 and "is a file, not a folder" in _one_line(err) and "train: step" not in err

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 2**20, 2**20))  # 1 MiB free
    code, err = _cli(capsys, *base, "--out", str(tmp_path / "model"))
    assert code == 2 and "the disk is full" in _one_line(err) and "train: step" not in err

    with pytest.raises(OutputUnwritable, match="the disk is full"):
        with naming_a_full_disk("/somewhere"):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_a_stale_op_build_lock_is_cleared_and_a_live_one_is_waited_for_with_a_word(tmp_path):
    import subprocess
    import sys
    import time

    from tasks.training.trainer import BUILD_LOCK, op_build_lock

    (tmp_path / "deepspeed_shm_comm").mkdir()
    stale = tmp_path / "deepspeed_shm_comm" / "lock"  # what torch leaves when a build is killed
    stale.write_text("")
    said: list[str] = []
    with op_build_lock(said.append, tmp_path):
        assert not stale.exists()
    assert said == [f"train: removed {stale}, left by an op build that was killed"]

    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"h = open({str(tmp_path / BUILD_LOCK)!r}, 'a+'); fcntl.flock(h, fcntl.LOCK_EX)\n"
        "h.seek(0); h.truncate(); h.write('process 4242'); h.flush(); print('held', flush=True); time.sleep(2)\n")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    said.clear()
    start = time.monotonic()
    with op_build_lock(said.append, tmp_path):
        waited = time.monotonic() - start
    holder.wait(timeout=10)
    assert waited >= 1.0 and said == [f"train: waiting for process 4242, which is compiling DeepSpeed's ops in {tmp_path}"]


def test_training_names_a_damaged_dual_views_file_before_it_starts(tmp_path, capsys):
    from tests.helpers.reference_engine import reference_config
    from tests.helpers.world import WorldConfig, build_world

    files = build_world(WorldConfig(seed=1, seed_topics=6, eval_topics=2)).write(tmp_path / "world")
    out = tmp_path / "out"
    run_synthesis(files["seeds"], str(out), reference_config(files["world"]), progress=lambda _: None)
    views = out / "dual_views.parquet"
    views.write_bytes(views.read_bytes()[:-100])
    code, err = _cli(capsys, "train", "--mixture", "ins-dv", "--seeds", files["seeds"], "--dual-views", str(views),
                     "--out", str(tmp_path / "model"), "--max-steps", "1", "--mixture-cache", str(tmp_path / "mix"))
    line = _one_line(err)
    assert code == 2 and f"{views} is damaged" in line and "rebuild it" in line and "train: step" not in err
