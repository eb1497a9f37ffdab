"""The DeepSpeed JSON is generated from TrainingConfig: every value traced to a field by hand."""

from __future__ import annotations

import pytest

from dualview_core.config import TrainingConfig
from dualview_core.training.ds_config import deepspeed_config, precision, warmup_steps


def test_cpu_config_from_defaults():
    cfg = TrainingConfig(batch_size=8, grad_accumulation=2, learning_rate=3e-5, warmup_ratio=0.1, max_grad_norm=0.5)
    assert deepspeed_config(cfg, world_size=2, total_steps=50, device="cpu") == {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 2,
        "train_batch_size": 32,  # 8 rows x 2 micro-batches x 2 ranks
        "gradient_clipping": 0.5,
        "zero_optimization": {"stage": 0},
        "zero_allow_untested_optimizer": False,
        "bf16": {"enabled": False},  # fp32 on CPU
        "fp16": {"enabled": False},
        "scheduler": {"type": "WarmupDecayLR", "params": {
            "total_num_steps": 50, "warmup_num_steps": 5, "warmup_min_lr": 0.0, "warmup_max_lr": 3e-5,
            "warmup_type": "linear"}},
        "steps_per_print": 50,
        "wall_clock_breakdown": False,
    }


def test_gpu_uses_bf16_and_zero_stages_allow_the_torch_optimizer():
    ds = deepspeed_config(TrainingConfig(zero_stage=2), world_size=4, total_steps=10, device="cuda")
    assert ds["bf16"] == {"enabled": True} and ds["zero_optimization"] == {"stage": 2}
    assert ds["zero_allow_untested_optimizer"] is True and ds["train_batch_size"] == 64


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_bf16_under_zero_accumulates_gradients_in_fp32(stage):
    ds = deepspeed_config(TrainingConfig(zero_stage=stage, precision="bf16"), world_size=1, total_steps=10, device="cuda")
    assert ds["bf16"] == {"enabled": True} and ds["data_types"] == {"grad_accum_dtype": "fp32"}
    assert "torch_autocast" not in ds


def test_bf16_without_zero_keeps_fp32_weights_and_autocasts_the_forward():
    # DeepSpeed's own bf16 at stage 0 would sum the chunks' gradients in bf16
    ds = deepspeed_config(TrainingConfig(zero_stage=0), world_size=1, total_steps=10, device="cuda")
    assert ds["bf16"] == {"enabled": False} and ds["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert "data_types" not in ds


def test_fp32_has_neither():
    ds = deepspeed_config(TrainingConfig(zero_stage=2, precision="fp32"), world_size=1, total_steps=10, device="cuda")
    assert ds["bf16"] == {"enabled": False} and "data_types" not in ds and "torch_autocast" not in ds


def test_precision_choice():
    assert precision(TrainingConfig(), "cpu") == "fp32" and precision(TrainingConfig(), "cuda") == "bf16"
    assert precision(TrainingConfig(precision="fp32"), "cuda") == "fp32"
    assert precision(TrainingConfig(precision="bf16"), "cpu") == "bf16"
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        precision(TrainingConfig(), "tpu")


def test_warmup_is_at_least_one_step():
    assert warmup_steps(TrainingConfig(warmup_ratio=0.0), 100) == 1  # DeepSpeed rejects 0
    assert warmup_steps(TrainingConfig(warmup_ratio=0.25), 100) == 25


def test_bad_values_fail():
    with pytest.raises(ValueError, match="must be positive"):
        deepspeed_config(TrainingConfig(), world_size=1, total_steps=0, device="cpu")
    with pytest.raises(ValueError, match="less than or equal to 3"):
        TrainingConfig(zero_stage=4)
