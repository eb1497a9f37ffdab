"""A crashed training run resumes: real DeepSpeed on CPU, the packaged MiniLM, the bundled sample.

- in process: a run that dies after step 5 (state saved at 4) is started again and ends with the
  same weights and the same last losses as a run that never stopped; the state is then removed;
- the same run started once more after it published returns that checkpoint, untouched;
- on S3, an upload a crash cut short is taken over by the run that resumes, and by no other;
- a state saved by a run with another config is refused before any training, and kept;
- `dualview train --processes 2` (the deepspeed launcher, ZeRO-2: each rank saves its own optimizer
  shard) killed with SIGKILL while saving to S3 (moto) resumes from the S3 state when the same
  command is run again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.training.resume import PROGRESS, StateMismatch, state_location, tag_for
from flows.cli import main
from tasks.training.output import OutputExists
from tasks.training.worker import run
from tasks.training.trainer import LOSS
from tests.helpers.services import running_with

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# ZeRO 1: the optimizer state is DeepSpeed's sharded kind, the one a resume must restore exactly.
CFG = TrainingConfig(mixture=MixtureConfig(name="all-dv"), batch_size=4, max_steps=6, save_every=2, eval_every=0,
                     max_length=48, negatives=3, learning_rate=5e-5, zero_stage=1)


class Crash(RuntimeError):
    pass


def losses(history) -> dict[int, float]:
    return {r["step"]: r[LOSS] for r in history if LOSS in r}


def crash_after(step: int):
    def callback(at: int, metrics: dict) -> None:
        if at == step and LOSS in metrics:
            raise Crash(f"killed after step {step}")
    return callback


@pytest.fixture(scope="module")
def uninterrupted(sample, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("whole") / "model")
    return out, run(CFG, *sample, out)


def test_a_crashed_run_resumes_to_the_model_an_uninterrupted_run_makes(sample, uninterrupted, tmp_path):
    whole_out, whole = uninterrupted
    out = str(tmp_path / "model")
    with pytest.raises(Crash):
        run(CFG, *sample, out, callback=crash_after(5))
    state = Path(state_location(out))
    progress = json.loads((state / PROGRESS).read_text())
    assert progress["step"] == 4 and not Path(out).exists()
    assert sorted(p.name for p in state.iterdir() if p.is_dir()) == [tag_for(4)]  # step 2's state was removed

    resumed = run(CFG, *sample, out)

    assert resumed.resumed_from == 4 and resumed.steps == 6
    assert sorted(losses(resumed.history)) == [5, 6]
    for step, loss in losses(resumed.history).items():
        assert loss == pytest.approx(losses(whole.history)[step], rel=1e-5, abs=1e-7)
    ours, theirs = load_file(f"{out}/model.safetensors"), load_file(f"{whole_out}/model.safetensors")
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-5, atol=1e-6, msg=name)
    assert not state.exists()  # published, so the state is gone
    assert json.loads(Path(out, "dualview.json").read_text())["resumed_from"] == 4


def test_a_published_run_started_again_returns_its_checkpoint(sample, uninterrupted):
    out, whole = uninterrupted
    written = Path(out, "model.safetensors").stat().st_mtime_ns

    again = run(CFG, *sample, out)  # e.g. a retried flow run whose first attempt had published

    assert (again.checkpoint, again.steps, again.resumed_from, again.history) == (out, 6, 6, [])
    assert again.digest == whole.digest and Path(out, "model.safetensors").stat().st_mtime_ns == written
    with pytest.raises(OutputExists, match="already exists"):  # another run never takes it over
        run(CFG.model_copy(update={"learning_rate": 1e-4}), *sample, out)


def test_an_upload_cut_short_is_taken_over_by_the_run_that_resumes(sample, s3_options):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_options)
    fs.mkdir("cut-short")
    out, cfg = "s3://cut-short/model", CFG.model_copy(update={"max_steps": 4})
    with pytest.raises(Crash):
        run(cfg, *sample, out, storage_options=s3_options, callback=crash_after(3))
    fs.pipe_file("cut-short/model/model.safetensors", b"half an upload")  # no dualview.json: unfinished
    with pytest.raises(OutputExists, match="holds no dualview.json"):  # not this run's: refused
        run(cfg.model_copy(update={"learning_rate": 1e-4}), *sample, out, storage_options=s3_options)

    resumed = run(cfg, *sample, out, storage_options=s3_options)

    assert resumed.resumed_from == 2 and sorted(losses(resumed.history)) == [3, 4]
    fs.invalidate_cache()
    assert fs.exists("cut-short/model/dualview.json") and fs.size("cut-short/model/model.safetensors") > 1000
    assert not fs.exists("cut-short/model.state")


def ranks_alive(out: str, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while running_with(out):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.5)
    return False


def test_a_state_of_another_run_is_refused_and_kept(sample, tmp_path, capsys):
    out = str(tmp_path / "model")
    cfg = CFG.model_copy(update={"max_steps": 3})
    with pytest.raises(Crash):
        run(cfg, *sample, out, callback=crash_after(3))
    progress = Path(state_location(out), PROGRESS)
    before = progress.read_text()

    with pytest.raises(StateMismatch, match="another training config or other data"):
        run(cfg.model_copy(update={"learning_rate": 1e-4}), *sample, out)
    capsys.readouterr()
    code = main(["train", "--mixture", "all-dv", "--seeds", sample[0], "--dual-views", sample[1], "--out", out,
                 "--max-steps", "3"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("dualview: error:") and "another training config" in err
    assert "Loading weights" not in err  # refused before the model was loaded
    assert progress.read_text() == before and not Path(out).exists()


def test_a_killed_two_rank_command_resumes_from_its_state_on_s3(sample, s3_server, s3_options):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_options)
    fs.mkdir("resume-runs")
    out = "s3://resume-runs/model"
    cmd = [str(Path(sys.executable).parent / "dualview"), "train", "--mixture", "ins-dv", "--seeds", sample[0],
           "--dual-views", sample[1], "--out", out, "--max-steps", "12", "--save-every", "4", "--batch-size", "2",
           "--max-length", "32", "--negatives", "2", "--processes", "2", "--zero-stage", "2",
           "--endpoint-url", s3_server]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    progress = f"resume-runs/model.state/{PROGRESS}"
    deadline = time.monotonic() + 600
    while not fs.exists(progress) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        fs.invalidate_cache()
    os.killpg(first.pid, signal.SIGKILL)  # the command, the launcher and both ranks
    first.wait()
    assert first.returncode == -signal.SIGKILL, "the first run ended before it could be killed"
    assert not ranks_alive(out), "a rank outlived the kill"
    saved = json.loads(fs.cat_file(progress))["step"]
    assert not fs.exists("resume-runs/model/dualview.json")

    second = subprocess.run(cmd, capture_output=True, text=True, check=False)

    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout)
    assert summary["resumed_from"] == saved >= 4 and summary["steps"] == 12 and summary["world_size"] == 2
    fs.invalidate_cache()
    assert fs.exists("resume-runs/model/dualview.json") and not fs.exists("resume-runs/model.state")
