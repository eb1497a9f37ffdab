"""The published checkpoint holds the optimizer's fp32 master weights, under every ZeRO stage.

A bf16 run under ZeRO 1-3 trains a bf16 working copy; what it publishes must be the fp32 masters
(which round to that copy exactly, and mostly are not bf16 numbers themselves). Without ZeRO the fp32
weights train under bf16 autocast and are published as they are. DeepSpeed runs bf16 on CPU too, so
this runs here; tests/gpu/ runs the same check on CUDA. An fp32 run publishes its weights exactly.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.published_weights import check_masters, trained_weights

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("stage", [0, 3])
def test_a_bf16_run_publishes_fp32_master_weights(stage):
    check_masters(*trained_weights(stage, "bf16"), stage)


def test_an_fp32_run_publishes_its_weights_exactly():
    weights, working = trained_weights(0, "fp32")
    assert all(torch.equal(weights[k], working[k]) for k in weights)
