"""On CUDA: a bf16 step of many gradient-cache chunks has the fp32 step's gradient within the stated
tolerance, summed in fp32 (tests/helpers/precision.py; the same check runs on the CPU in
tests/integration/test_grad_cache.py)."""

from __future__ import annotations

import pytest

from tests.helpers.precision import check_bf16_gradients
from tests.integration.test_grad_cache import batch, small  # noqa: F401 (batch is a fixture)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_a_bf16_step_on_cuda_has_the_fp32_gradient_within_tolerance(batch, zero):  # noqa: F811
    check_bf16_gradients(small, batch, zero)
