"""Gradient caching gives the uncached step's gradients: the packaged MiniLM under real DeepSpeed
(gloo on CPU, one rank), dropout on, in-batch negatives on, ZeRO stages 0, 1 and 2 (1 and 2 marked
slow: each variant loads its own engine, ~15 s).

Each variant loads the model afresh with the same seed and back-propagates one micro-batch of
the bundled sample (`tasks.training._backward`, which the trainer runs before `engine.step()`); the
full gradient of every weight is read through DeepSpeed (`safe_get_full_grad`, ZeRO's partitions
included) and compared at fp32 tolerance. The dropout check: the same step with the RNG state not
restored between the two passes gives different gradients, so the comparison can fail.
"""

from __future__ import annotations

import pytest
import torch

from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.negatives import block_width, make_batch

pytestmark = [pytest.mark.integration]

CHUNK = 3  # texts per chunk in both variants: the same chunks draw the same dropout masks


def gradients(cfg: TrainingConfig, batch) -> tuple[float, dict[str, torch.Tensor]]:
    from deepspeed.utils import safe_get_full_grad

    from tasks.training import _backward, _load, worker_environment

    with worker_environment():
        engine, encoder = _load(cfg, steps=10, world=1)
        engine.train()
        loss, _ = _backward(engine, encoder, batch, cfg, rank=0, world=1)
        grads = {n: safe_get_full_grad(p).clone() for n, p in engine.module.named_parameters()}
    return loss, grads


@pytest.fixture(scope="module")
def batch(sample):
    from tasks.train_worker import load_mixture

    cfg = TrainingConfig(mixture=MixtureConfig(name="all-dv"), negatives=3)
    mixture = load_mixture(cfg.mixture, *sample)
    rows = mixture.rows[:4]
    return make_batch(rows, block_width(rows, cfg.negatives, strict=False), epoch=0, seed=0, template=cfg.query_template)


def small(**kw) -> TrainingConfig:
    return TrainingConfig(max_length=24, negatives=3, batch_size=4, encode_chunk=CHUNK, **kw)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("zero", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_a_cached_step_has_the_uncached_gradients(batch, zero):
    loss, plain = gradients(small(grad_cache_chunk=0, zero_stage=zero), batch)
    cached_loss, cached = gradients(small(grad_cache_chunk=CHUNK, zero_stage=zero), batch)
    assert cached_loss == pytest.approx(loss, rel=1e-5)
    assert sum(float(g.abs().sum()) for g in plain.values()) > 0
    assert_same(cached, plain)


def test_without_the_saved_rng_state_dropout_differs(batch, monkeypatch):
    from tasks import grad_cache

    _, plain = gradients(small(grad_cache_chunk=0), batch)
    monkeypatch.setattr(grad_cache.RngState, "restore", lambda self: None)
    _, unrestored = gradients(small(grad_cache_chunk=CHUNK), batch)
    with pytest.raises(AssertionError):
        assert_same(unrestored, plain)
