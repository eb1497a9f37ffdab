"""Device and precision are chosen, not assumed: an evaluation in bf16 stays within the stated
tolerance of fp32 (tests/helpers/precision.py; tests/gpu/test_evaluation_cuda.py checks CUDA bf16
against the same reference), and a device this machine lacks is refused in one line."""

from __future__ import annotations

import pytest

from tests.helpers.precision import check_close, evaluate_sample

pytestmark = pytest.mark.integration


def test_bf16_on_the_cpu_ranks_within_the_tolerance_of_fp32():
    reference = evaluate_sample("cpu", "fp32")
    lower = evaluate_sample("cpu", "bf16")
    assert (reference.details["device"], reference.details["precision"]) == ("cpu", "fp32")
    assert lower.details["precision"] == "bf16"
    check_close(reference, lower)


def test_auto_is_the_cpu_in_fp32_without_cuda_and_cuda_is_refused_in_one_line(capsys):
    import torch

    from dualview_core import sample
    from dualview_core.model import placement
    from flows.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert placement() == ("cpu", "fp32") and placement("cpu", "bf16") == ("cpu", "bf16")
    code = main(["evaluate", "--model", "minilm", "--eval-set", sample.followir_path(), "--device", "cuda"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no CUDA device" in err
    code = main(["evaluate", "--model", "minilm", "--eval-set", sample.followir_path(), "--device", "tpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--device" in err
