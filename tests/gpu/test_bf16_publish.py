"""On CUDA (bf16 is the production precision there): the published checkpoint holds the fp32 masters."""

from __future__ import annotations

import pytest

from tests.helpers.published_weights import check_masters, trained_weights

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_bf16_run_on_cuda_publishes_fp32_master_weights(stage):
    check_masters(*trained_weights(stage, "bf16"), stage)
