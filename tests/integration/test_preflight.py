"""`dualview train` refuses a step that cannot fit in memory: exit 2, one line naming the flag to
change, before any data is read or model loaded (`tasks.training.preflight`; the available memory is set
through DUALVIEW_AVAILABLE_MEMORY, the override the check documents)."""

from __future__ import annotations

import pytest

from dualview_core import sample
from dualview_core.training.memory import GIB
from flows.cli import main
from tasks.training import preflight

pytestmark = [pytest.mark.integration]


class Reached(RuntimeError):
    pass


@pytest.fixture
def guarded(monkeypatch):
    """Reading the data or loading the model raises: a refusal must come before both."""
    import tasks.training.worker
    import tasks.training.trainer

    def reached(*args, **kwargs):
        raise Reached("went past the pre-flight check")

    monkeypatch.setattr(tasks.training.worker, "load_mixture", reached)
    monkeypatch.setattr(tasks.training.trainer, "_load", reached)
    return monkeypatch


def train(capsys, out, *flags) -> tuple[int, str, str]:
    code = main(["train", "--mixture", "ins-orig", "--seeds", sample.seeds_path(), "--out", str(out), *flags])
    stdout, err = capsys.readouterr()
    return code, stdout, err


def test_a_step_too_big_for_the_memory_is_refused_with_one_line(guarded, tmp_path, capsys):
    guarded.setenv(preflight.AVAILABLE_ENV, "1GiB")
    code, stdout, err = train(capsys, tmp_path / "never")
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("dualview: error: a training step needs about 3.3 GiB per rank")
    assert "activations of 8 texts at 512 tokens" in err and "DUALVIEW_AVAILABLE_MEMORY has 1.0 GiB available" in err
    assert err.strip().endswith("lower --grad-cache-chunk (now 8) or --max-length (now 512)")
    assert not (tmp_path / "never").exists()


def test_without_gradient_caching_the_whole_batch_counts(guarded, tmp_path, capsys):
    guarded.setenv(preflight.AVAILABLE_ENV, "24GiB")
    code, _, err = train(capsys, tmp_path / "never", "--grad-cache-chunk", "0", "--batch-size", "16")
    assert code == 2 and "activations of 512 texts at 512 tokens" in err  # 16 rows x (query, positive, 30)
    assert err.strip().endswith("turn on gradient caching (--grad-cache-chunk 8) or lower --max-length (now 512)")


def test_a_step_that_fits_goes_on_to_read_the_data(guarded, tmp_path, capsys):
    guarded.setenv(preflight.AVAILABLE_ENV, "2GiB")
    with pytest.raises(Reached):  # 1 GiB of runtime, 0.3 GiB of weights and optimizer, 4 texts at 64 tokens
        train(capsys, tmp_path / "small", "--grad-cache-chunk", "4", "--max-length", "64")


def test_ranks_on_one_cpu_machine_share_its_memory(monkeypatch):
    from dualview_core.config import TrainingConfig

    monkeypatch.delenv(preflight.AVAILABLE_ENV, raising=False)
    whole, where = preflight.available_memory("cpu", 1)
    half, where_half = preflight.available_memory("cpu", 2)
    assert abs(half - whole // 2) < GIB // 4 and where == "this machine" and "2 ranks" in where_half
    monkeypatch.setenv(preflight.AVAILABLE_ENV, "3GiB")
    assert preflight.available_memory("cpu", 2) == (3 * GIB, preflight.AVAILABLE_ENV)
    monkeypatch.setenv(preflight.AVAILABLE_ENV, "lots")
    with pytest.raises(ValueError, match="expected bytes"):
        preflight.check_memory(TrainingConfig(), world=1)


def test_the_packaged_model_shape_is_read_from_its_files():
    shape = preflight.model_shape("minilm")
    assert (shape.layers, shape.hidden, shape.heads, shape.intermediate) == (6, 384, 12, 1536)
    assert shape.params == 22_713_728  # MiniLM-L6's safetensors header, weights never read
    assert preflight.model_shape("some-org/not-a-local-folder") is None  # a hub id: nothing to estimate from


def test_a_mixture_too_small_for_the_ranks_is_refused_before_the_launcher_starts(tmp_path, capsys, monkeypatch):
    import tasks.training.worker

    def launched(*args, **kwargs):
        raise Reached("the launcher was started")

    monkeypatch.setattr(tasks.training.worker, "launch", launched)
    code, stdout, err = train(capsys, tmp_path / "never", "--size", "4", "--batch-size", "4", "--processes", "2",
                              "--max-length", "64", "--mixture-cache", str(tmp_path / "cache"))
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert err.strip() == ("dualview: error: 4 rows do not fill one global batch of 4 x 2 ranks: fewer ranks, "
                           "a smaller batch or a larger mixture")


@pytest.mark.parametrize("available, expected", [("1.7GB", None), ("64GiB", 0)])
def test_an_auto_chunk_is_sized_to_the_memory_once_the_model_is_loaded(monkeypatch, tmp_path, capsys, available, expected):
    """`--grad-cache-chunk auto`: what the estimate fits beside the loaded model (1.7 GB: some texts at
    a time; 64 GiB: the whole step, no caching), recorded in the checkpoint as the chunk that ran."""
    import json

    from dualview_core.training.memory import sized_chunk

    monkeypatch.setenv(preflight.AVAILABLE_ENV, available)
    out = tmp_path / "auto"
    code, stdout, err = train(capsys, out, "--grad-cache-chunk", "auto", "--max-length", "64", "--batch-size", "4",
                              "--negatives", "3", "--max-steps", "1")
    assert code == 0, err
    ran = json.loads((out / "dualview.json").read_text())["training_config"]["grad_cache_chunk"]
    if expected is None:  # the estimate's own answer for the packaged model's shape and these sizes
        shape = preflight.model_shape("minilm")
        expected = sized_chunk(shape, preflight.parse_bytes(available), batch_size=4, negatives=3, max_length=64,
                               precision="fp32", zero_stage=0, world=1)
        assert 0 < expected < 4 * (2 + 3), expected  # caching on: not the whole step at once
    assert ran == expected
    assert f"train: gradient-cache chunk auto: {expected or 'off (the whole step fits)'}" in stdout + err
