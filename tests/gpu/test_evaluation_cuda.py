"""On CUDA: evaluation encodes on the accelerator (auto picks it, in bf16) and its numbers and rankings
stay within the stated tolerance of fp32 on the CPU (tests/helpers/precision.py)."""

from __future__ import annotations

import pytest

from tests.helpers.precision import check_close, evaluate_sample

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_auto_evaluates_on_cuda_in_bf16_within_the_tolerance_of_cpu_fp32():
    reference = evaluate_sample("cpu", "fp32")
    on_gpu = evaluate_sample("auto", "auto")
    assert (on_gpu.details["device"], on_gpu.details["precision"]) == ("cuda:0", "bf16")
    check_close(reference, on_gpu)
