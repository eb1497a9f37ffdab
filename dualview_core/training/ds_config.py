"""The DeepSpeed configuration, generated from the typed `TrainingConfig` — never edited by hand.

Owns the translation of one training config, the run's world size and step count, and the device
kind into DeepSpeed's JSON dict: micro-batch, accumulation, ZeRO stage, precision, clipping, and the
warm-up + linear-decay schedule. It is a pure dict builder: it does not import DeepSpeed (the task
that calls `deepspeed.initialize` does) and reads no environment.

The optimizer is not in the JSON: the trainer passes `torch.optim.AdamW` itself, so nothing needs
compiling on CPU; DeepSpeed then wants `zero_allow_untested_optimizer` for ZeRO stages ≥ 1.

bf16 keeps gradients in fp32 wherever they add up. A step's gradient is the sum of many backward
passes (one per gradient-cache chunk, times the accumulated micro-batches); summed in bf16, its 8-bit
mantissa drops the small contributions. ZeRO 1-3 hold bf16 weights with fp32 master copies and
accumulate gradients in fp32 (`data_types.grad_accum_dtype`). Without ZeRO, DeepSpeed's bf16 would
sum gradients and update weights in bf16 alone, so stage 0 keeps fp32 weights and gradients and
computes the forward under autocast to bf16 (`torch_autocast`) instead.

    >>> from dualview_core.config import TrainingConfig
    >>> cfg = deepspeed_config(TrainingConfig(batch_size=4), world_size=2, total_steps=100, device="cpu")
    >>> cfg["train_batch_size"], cfg["bf16"]["enabled"], cfg["scheduler"]["params"]["warmup_num_steps"]
    (8, False, 10)
"""

from __future__ import annotations

from dualview_core.config import TrainingConfig

DEVICES = ("cpu", "cuda")


def precision(cfg: TrainingConfig, device: str) -> str:
    """'bf16' or 'fp32'. auto picks bf16 on GPU and fp32 on CPU, where bf16 is slow and lossy."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")
    if cfg.precision == "auto":
        return "bf16" if device == "cuda" else "fp32"
    return cfg.precision


def _precision_sections(chosen: str, stage: int) -> dict:
    """DeepSpeed's precision sections for `chosen` ('bf16' or 'fp32') at ZeRO `stage`.

        >>> _precision_sections("bf16", 2)["data_types"], _precision_sections("bf16", 0)["torch_autocast"]
        ({'grad_accum_dtype': 'fp32'}, {'enabled': True, 'dtype': 'bfloat16'})
    """
    bf16 = chosen == "bf16"
    sections: dict = {"bf16": {"enabled": bf16 and stage > 0}, "fp16": {"enabled": False}}
    if bf16 and stage > 0:
        sections["data_types"] = {"grad_accum_dtype": "fp32"}
    if bf16 and stage == 0:
        sections["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    return sections


def warmup_steps(cfg: TrainingConfig, total_steps: int) -> int:
    """At least 1: DeepSpeed's WarmupLR rejects 0 (and treats anything under 2 as 2)."""
    return max(1, int(cfg.warmup_ratio * total_steps))


def deepspeed_config(cfg: TrainingConfig, *, world_size: int, total_steps: int, device: str) -> dict:
    """DeepSpeed's config dict for this run."""
    if world_size < 1 or total_steps < 1:
        raise ValueError(f"world_size and total_steps must be positive; got {world_size}, {total_steps}")
    stage = cfg.zero_stage
    return {
        "train_micro_batch_size_per_gpu": cfg.batch_size,
        "gradient_accumulation_steps": cfg.grad_accumulation,
        "train_batch_size": cfg.batch_size * cfg.grad_accumulation * world_size,
        "gradient_clipping": cfg.max_grad_norm,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": stage > 0,
        **_precision_sections(precision(cfg, device), stage),
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {
                "total_num_steps": total_steps,
                "warmup_num_steps": warmup_steps(cfg, total_steps),
                "warmup_min_lr": 0.0,
                "warmup_max_lr": cfg.learning_rate,
                "warmup_type": "linear",
            },
        },
        "steps_per_print": max(total_steps, 1),  # the trainer reports its own signals
        "wall_clock_breakdown": False,
    }
