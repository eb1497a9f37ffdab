"""Training end to end on the bundled sample: real DeepSpeed (gloo on CPU), the packaged MiniLM.

- one in-process worker: 30 steps on all-dv, the loss falls and the separation grows;
- its checkpoint loads in `SentenceTransformer(path)` with the embeddings the trainer had;
- two ranks under the `deepspeed` launcher (ZeRO-2, in-batch negatives gathered across ranks) save
  to a local S3-compatible server;
- `dualview train` makes a checkpoint for every mixture (one ZeRO stage each, 3 included), and bad
  requests fail before any model is loaded.

Dual views here are hand-written test fixtures (the `sample` fixture of tests/conftest.py), not synthesis.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import numpy as np
import pytest

from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.model import load_model
from dualview_core.training.separation import pairs_of
from flows.cli import main
from tasks.training.worker import load_mixture, run
from tasks.training.trainer import LOSS, LR, PEAK_ACCELERATOR_MB, PEAK_RSS_MB, SAMPLES_PER_S, SEPARATION, TOKENS_PER_S
from tests.helpers.samples import CHECKPOINT_FILES
from tests.helpers.services import running_with

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = {"max_length": 64, "negatives": 3, "learning_rate": 5e-5}


@pytest.fixture(scope="module")
def thirty_steps(sample, tmp_path_factory):
    cfg = TrainingConfig(mixture=MixtureConfig(name="all-dv"), batch_size=4, max_steps=30, eval_every=15, **SMALL)
    records: list[tuple[int, dict]] = []
    out = str(tmp_path_factory.mktemp("run") / "checkpoint")
    result = run(cfg, *sample, out, callback=lambda step, metrics: records.append((step, metrics)))
    return cfg, result, records


def series(records, name: str) -> list[tuple[int, float]]:
    return [(step, m[name]) for step, m in records if name in m]


def test_single_worker_loss_falls_and_signals_are_reported(thirty_steps):
    cfg, result, records = thirty_steps
    assert result.world_size == 1 and result.steps == 30
    assert result.composition["by_source"] == {"instruct": 58, "non_instruct": 0, "dual_view": 58}
    losses = [v for _, v in series(records, LOSS)]
    assert len(losses) == 30
    first, last = statistics.mean(losses[:10]), statistics.mean(losses[-10:])
    # a dual view keeps the seed's other instruction negatives beside the old positive, so its K hard
    # negatives are on-topic ones: the loss falls by less in 30 steps than with sampled ones
    assert last < 0.6 * first, f"loss did not fall: first 10 steps {first:.3f}, last 10 {last:.3f}"
    lrs = [v for _, v in series(records, LR)]  # linear warm-up from 0, then linear decay towards 0
    peak = lrs.index(max(lrs))
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(cfg.learning_rate) and lrs[-1] < 0.1 * cfg.learning_rate
    assert all(a > b for a, b in zip(lrs[peak:], lrs[peak + 1 :])), lrs
    assert all(v > 0 for _, v in series(records, SAMPLES_PER_S) + series(records, TOKENS_PER_S))
    # a high-water mark per step: a model and its optimizer hold hundreds of MiB, and it never falls
    peaks = [v for _, v in series(records, PEAK_RSS_MB)]
    assert len(peaks) == 30 and peaks[0] > 200 and peaks == sorted(peaks), peaks
    assert not series(records, PEAK_ACCELERATOR_MB)  # no CUDA here, so no device memory to report
    separation = series(records, SEPARATION)
    assert [s for s, _ in separation] == [0, 15, 30]
    assert separation[-1][1] > separation[0][1], f"instruction separation did not grow: {separation}"
    assert result.history == [{"step": s, **m} for s, m in records]


def test_checkpoint_round_trip_through_sentence_transformers(thirty_steps, sample):
    from sentence_transformers import SentenceTransformer

    cfg, result, records = thirty_steps
    path = Path(result.checkpoint)
    assert CHECKPOINT_FILES <= {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
    texts = ["how long to ferment sauerkraut", "Small-Jar Sauerkraut: Timing by Temperature For a one-quart jar ..."]
    st = SentenceTransformer(str(path), device="cpu")
    assert st.max_seq_length == cfg.max_length
    # the checkpoint is the trained model: the last separation the trainer logged, recomputed via ST
    from dualview_core.training.separation import separation

    pairs = pairs_of(load_mixture(cfg.mixture, *sample).heldout)
    recomputed = separation(lambda t: st.encode(t), pairs, cfg.query_template)
    assert recomputed == pytest.approx(series(records, SEPARATION)[-1][1], abs=1e-5)
    assert not np.allclose(load_model("minilm", max_length=cfg.max_length).encode(texts), st.encode(texts), atol=1e-4)
    meta = json.loads((path / "dualview.json").read_text())
    assert meta["data_digest"] == result.digest and meta["training_config"]["mixture"]["name"] == "all-dv"


def test_an_in_process_run_leaves_no_rank_variables_behind(thirty_steps):
    # a child process started later (a launcher, the CLI) must not inherit a port this process holds
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"} & set(os.environ)


def test_compiled_ops_are_cached_inside_the_project(thirty_steps):
    root = Path(__file__).resolve().parents[2]
    cache = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    assert cache.is_relative_to(root) and any(cache.rglob("*shm_comm*"))


def test_two_ranks_under_the_deepspeed_launcher_save_to_s3(sample, s3_options, tmp_path):
    import s3fs
    from sentence_transformers import SentenceTransformer

    fs = s3fs.S3FileSystem(**s3_options)
    fs.mkdir("training-runs")
    cfg = TrainingConfig(mixture=MixtureConfig(name="ins-dv"), batch_size=2, max_steps=3, zero_stage=2, **SMALL)
    live: list[tuple[int, bool]] = []  # (step, were the ranks still running when it arrived)
    out = "s3://training-runs/two-ranks"
    result = run(cfg, *sample, out, processes=2, storage_options=s3_options,
                 callback=lambda step, metrics: live.append((step, running_with(out))) if LOSS in metrics else None)
    assert result.world_size == 2 and result.steps == 3
    assert [step for step, _ in live] == [1, 2, 3] and live[0][1], "signals arrive while the ranks train"
    assert [s for s, _ in series([(r["step"], r) for r in result.history], LOSS)] == [1, 2, 3]
    stored = {p.removeprefix("training-runs/two-ranks/") for p in fs.find("training-runs/two-ranks")}
    assert CHECKPOINT_FILES <= stored
    local = tmp_path / "downloaded"
    fs.get("training-runs/two-ranks", str(local), recursive=True)
    assert json.loads((local / "dualview.json").read_text())["world_size"] == 2
    texts = ["query one", "a document about wind"]
    trained = SentenceTransformer(str(local), device="cpu")
    assert trained.max_seq_length == cfg.max_length and np.isfinite(trained.encode(texts)).all()


def cli(capsys, *argv) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


@pytest.mark.parametrize("mixture, extra, zero, rows", [
    ("ins-orig", [], 0, 58),
    ("ins-dv", [], 1, 58),
    ("all-orig", [], 3, 116),
    ("all-dv", [], 2, 116),
    ("ratio", ["--ratio", "0.25", "--total", "40"], 0, 40),
])
def test_cli_makes_a_checkpoint_for_each_mixture(sample, tmp_path, capsys, mixture, extra, zero, rows):
    seeds, views = sample
    out = tmp_path / mixture
    tiny = ["--max-steps", "1", "--batch-size", "2", "--max-length", "32", "--negatives", "1"]
    code, summary, err = cli(capsys, "train", "--mixture", mixture, "--seeds", seeds, "--dual-views", views,
                             "--out", str(out), *tiny, "--zero-stage", str(zero), *extra)
    assert code == 0, err
    assert summary["composition"]["rows"] == rows and summary["steps"] == 1 and summary["checkpoint"] == str(out)
    assert summary["peak_rss_mb"] > 200 and "peak_accelerator_mb" not in summary
    assert (summary["device"], summary["precision"]) == ("cpu", "fp32")  # auto, on a machine without CUDA
    assert json.loads((out / "dualview.json").read_text())["precision"] == "fp32"
    assert CHECKPOINT_FILES <= {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert json.loads((out / "dualview.json").read_text())["training_config"]["zero_stage"] == zero


def test_console_script_stdout_is_only_the_json_summary(sample, tmp_path):
    import subprocess
    import sys

    seeds, views = sample
    script = Path(sys.executable).parent / "dualview"
    out = subprocess.run([str(script), "train", "--mixture", "ins-dv", "--seeds", seeds, "--dual-views", views,
                          "--out", str(tmp_path / "ck"), "--max-steps", "1", "--batch-size", "2", "--max-length", "32",
                          "--negatives", "1"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["composition"]["rows"] == 58  # DeepSpeed's own chatter went to stderr
    assert "DeepSpeed" in out.stderr
    lines = out.stderr.splitlines()  # progress: the plan, then each separation measurement with the share done
    assert "train: 1 optimizer steps to run" in lines
    assert any(line.startswith("train: step 0/1 (0%) instruction_separation") for line in lines), lines
    assert any(line.startswith("train: step 1/1 (100%) instruction_separation") for line in lines), lines


def test_bad_requests_fail_before_training_with_one_line(sample, tmp_path, capsys):
    seeds, views = sample
    base = ["train", "--seeds", seeds, "--out", str(tmp_path / "never")]
    cases = [
        (["--mixture", "all-dv", "--dual-views", views, "--negatives", "30", "--strict-negatives"],
         "negatives=30 is strict, but 116 of 116 rows have fewer (the most any row has is 8"),
        (["--mixture", "ins-dv"], "mixture ins-dv needs dual-view rows"),
        (["--mixture", "ins-orig", "--size", "200"], "mixture ins-orig needs 200 instruct rows; the data has 66"),
        (["--mixture", "ins-orig", "--zero-stage", "5"], "zero_stage: Input should be less than or equal to 3"),
        (["--mixture", "ins-orig", "--device", "cuda"],
         "training.device: device 'cuda' asked for, but torch sees no CUDA device here (use cpu or auto)"),
    ]
    for argv, message in cases:
        code, summary, err = cli(capsys, *base, *argv)
        assert code == 2 and summary is None and len(err.strip().splitlines()) == 1, err
        assert message in err
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    code, _, err = cli(capsys, "train", "--seeds", seeds, "--out", str(tmp_path / "taken"), "--mixture", "ins-orig")
    assert code == 2 and "already exists" in err
    with pytest.raises(SystemExit) as exc:
        main([*base, "--mixture", "ins-everything"])
    assert exc.value.code == 2 and "invalid choice: 'ins-everything'" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_length_sorted_chunks_do_not_change_embeddings():
    from tasks.training.trainer import _bi_encoder, _embed, _tokenize_sorted

    model = load_model("minilm", max_length=64, for_training=True)
    texts = ["a", "a much longer text about the storage of seeds in glass jars", "mid sized text", "b c", "x " * 40]
    expected = model.encode_query(texts)
    module = _bi_encoder(model).eval()
    for size in (1, 2, 100):
        got = _embed(module, *_tokenize_sorted(model, texts, size, "query"), "query").detach().numpy()
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_the_optimizer_is_fused_on_cuda_and_torch_s_default_on_the_cpu():
    from tasks.training.trainer import optimizer_for

    model = load_model("minilm", max_length=32, for_training=True)
    cfg = TrainingConfig(weight_decay=0.1)
    on_cpu, for_cuda = optimizer_for(model, cfg, "cpu"), optimizer_for(model, cfg, "cuda")
    assert on_cpu.defaults["fused"] is None and for_cuda.defaults["fused"] is True
    decayed, plain = for_cuda.param_groups  # biases and norms without decay
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in decayed["params"]) and all(p.ndim == 1 for p in plain["params"])
