"""A few optimizer steps of a real DeepSpeed engine on the bundled sample, and the check that what a
run publishes is the optimizer's fp32 master weights (tests/integration/test_published_weights.py on
CPU, tests/gpu/test_bf16_publish.py on CUDA)."""

from __future__ import annotations

import torch

from dualview_core import sample
from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.method.negatives import block_width
from tasks.training.output import full_state_dict
from tasks.training.worker import load_mixture
from tasks.training.trainer import _load, _micro_batches, _micro_step, worker_environment


def trained_weights(stage: int, precision: str, steps: int = 3) -> tuple[dict, dict]:
    """(published fp32 weights, the engine's working copy gathered), after a few optimizer steps."""
    cfg = TrainingConfig(mixture=MixtureConfig(name="ins-orig"), batch_size=2, max_length=32, negatives=1,
                         zero_stage=stage, precision=precision, learning_rate=1e-3)
    mixture = load_mixture(cfg.mixture, sample.seeds_path(), None)
    with worker_environment():
        engine, model = _load(cfg, 10, 1)
        engine.train()
        batches = _micro_batches(mixture, cfg, block_width(mixture.rows, cfg.negatives, strict=False), 0, 1)
        for _ in range(steps):
            _micro_step(engine, model, next(batches), cfg, 0, 1)
        weights = full_state_dict(engine)
        if stage == 3:
            working = {k.removeprefix("model."): v for k, v in engine._zero3_consolidated_16bit_state_dict().items()}
        else:
            working = {k: v.detach() for k, v in model.state_dict().items()}
    return weights, working


def check_masters(weights: dict, working: dict, stage: int) -> None:
    """A bf16 run publishes fp32 weights that are not bf16 numbers. ZeRO 1-3 train a bf16 working copy,
    which the published fp32 masters round to exactly; without ZeRO the fp32 weights themselves train
    (the forward runs under bf16 autocast), so they are the working copy, bit for bit."""
    name = "0.model.embeddings.word_embeddings.weight"
    working_dtype = torch.float32 if stage == 0 else torch.bfloat16
    for key, value in weights.items():
        assert value.dtype == torch.float32 and key in working
        kept = working[key].cpu()
        assert kept.dtype == working_dtype, (key, kept.dtype)
        assert torch.equal(value.to(working_dtype), kept), key
    w = weights[name]
    assert (w != w.bfloat16().float()).float().mean() > 0.5, "published weights passed through bf16"
