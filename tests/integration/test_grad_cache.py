"""Gradient caching gives the uncached step's gradients: the packaged MiniLM under real DeepSpeed
(gloo on CPU, one rank), dropout on, in-batch negatives on, ZeRO stages 0, 1 and 2 (1 and 2 marked
slow: each variant loads its own engine, ~15 s).

Each variant loads the model afresh with the same seed and back-propagates one micro-batch of
the bundled sample (`tasks.training.trainer._backward`, which the trainer runs before `engine.step()`); the
full gradient of every weight is read through DeepSpeed (`safe_get_full_grad`, ZeRO's partitions
included) and compared at fp32 tolerance. The dropout check: the same step with the RNG state not
restored between the two passes gives different gradients, so the comparison can fail.

In bf16 (DeepSpeed runs it on CPU too): a step of many chunks, each its own backward pass, has the
fp32 step's gradient within the tolerance bf16's own rounding allows, and the chunks' gradients add up
in fp32 — ZeRO 1-2 accumulate in fp32 beside bf16 weights; without ZeRO the fp32 weights train under
bf16 autocast.

Across ranks: two gloo ranks (spawned processes) each back-propagate their half of the batch with
every rank's documents as in-batch negatives; the all-reduced gradients of the cached and the
uncached step agree, at ZeRO 0 and 2.
"""

from __future__ import annotations

import os

import pytest
import torch

from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.method.negatives import block_width, make_batch
from tests.helpers.precision import check_bf16_gradients, step_gradients

pytestmark = [pytest.mark.integration]

CHUNK = 3  # texts per chunk in both variants: the same chunks draw the same dropout masks


def gradients(cfg: TrainingConfig, batch) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and full gradients of one micro-batch, dropout on (as the trainer runs it)."""
    loss, grads, _ = step_gradients(cfg, batch)
    return loss, grads


@pytest.fixture(scope="module")
def batch(sample):
    from tasks.training.worker import load_mixture

    cfg = TrainingConfig(mixture=MixtureConfig(name="all-dv"), negatives=3)
    mixture = load_mixture(cfg.mixture, *sample)
    rows = mixture.rows[:4]
    return make_batch(rows, block_width(rows, cfg.negatives, strict=False), epoch=0, seed=0, template=cfg.query_template)


def small(**kw) -> TrainingConfig:
    return TrainingConfig(**{"max_length": 24, "negatives": 3, "batch_size": 4, "encode_chunk": CHUNK, **kw})


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("zero", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_a_cached_step_has_the_uncached_gradients(batch, zero):
    loss, plain = gradients(small(grad_cache_chunk=0, zero_stage=zero), batch)
    cached_loss, cached = gradients(small(grad_cache_chunk=CHUNK, zero_stage=zero), batch)
    assert cached_loss == pytest.approx(loss, rel=1e-5)
    assert sum(float(g.abs().sum()) for g in plain.values()) > 0
    assert_same(cached, plain)


def test_without_the_saved_rng_state_dropout_differs(batch, monkeypatch):
    from tasks.training import grad_cache

    _, plain = gradients(small(grad_cache_chunk=0), batch)
    monkeypatch.setattr(grad_cache.RngState, "restore", lambda self: None)
    _, unrestored = gradients(small(grad_cache_chunk=CHUNK), batch)
    with pytest.raises(AssertionError):
        assert_same(unrestored, plain)


@pytest.mark.parametrize("zero", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_a_bf16_step_of_many_chunks_has_the_fp32_gradient_within_tolerance(batch, zero):
    check_bf16_gradients(small, batch, zero)


def _rank_gradients(rank: int, world: int, port: int, cfg: TrainingConfig, batches: list, out: str) -> None:
    """One spawned rank: this rank's micro-batch through `_backward`; rank 0 saves the full gradients."""
    from deepspeed.utils import safe_get_full_grad

    from tasks.training.trainer import _backward, _load, worker_environment

    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    with worker_environment():
        engine, encoder = _load(cfg, steps=10, world=world)
        engine.train()
        loss, _ = _backward(engine, encoder, batches[rank], cfg, rank=rank, world=world)
        grads = {n: safe_get_full_grad(p).clone() for n, p in engine.module.named_parameters()}
    if rank == 0:
        torch.save({"loss": loss, "grads": grads}, out)


def two_rank_gradients(cfg: TrainingConfig, batches: list, out: str) -> tuple[float, dict[str, torch.Tensor]]:
    import torch.multiprocessing as mp

    from tasks.training.trainer import free_port

    mp.start_processes(_rank_gradients, args=(2, free_port(), cfg, batches, out), nprocs=2, start_method="spawn")
    saved = torch.load(out)
    return saved["loss"], saved["grads"]


@pytest.mark.slow
@pytest.mark.parametrize("zero", [0, 2])
def test_across_two_ranks_a_cached_step_has_the_uncached_gradients(sample, tmp_path, zero):
    from tasks.training.worker import load_mixture

    cfg = TrainingConfig(mixture=MixtureConfig(name="all-dv"), negatives=3)
    rows = load_mixture(cfg.mixture, *sample).rows[:4]
    width = block_width(rows, cfg.negatives, strict=False)  # one width for both ranks, as the trainer does
    halves = [make_batch(rows[r * 2:(r + 1) * 2], width, epoch=0, seed=0, template=cfg.query_template) for r in (0, 1)]
    # τ = 1: every negative weighs in (at τ = 0.02 the other rank's off-topic documents add ~1e-11)
    both = {"zero_stage": zero, "batch_size": 2, "temperature": 1.0}
    loss, plain = two_rank_gradients(small(grad_cache_chunk=0, **both), halves, str(tmp_path / "plain.pt"))
    cached_loss, cached = two_rank_gradients(small(grad_cache_chunk=CHUNK, **both), halves, str(tmp_path / "cached.pt"))
    assert cached_loss == pytest.approx(loss, rel=1e-5)
    assert sum(float(g.abs().sum()) for g in plain.values()) > 0
    assert_same(cached, plain)
