"""How far a lower precision may move from fp32, as the CPU and GPU tests both state it: an
evaluation on the bundled sample (its metrics and top 10s), and a training step's gradient."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from dualview_core.config import TrainingConfig

METRIC_TOLERANCE = 1.0  # ×100 points: p-MRR and Score of the sample's suite
TOP10_OVERLAP = 0.8  # mean share of a query's fp32 top 10 that the other precision also ranks in its top 10


def evaluate_sample(device: str, precision: str):
    from dualview_core import sample
    from dualview_core.config import EvaluationConfig
    from tasks.evaluation.runner import evaluate_task

    cfg = EvaluationConfig(max_length=128, bootstrap_resamples=0, device=device, precision=precision)
    return evaluate_task("minilm", sample.followir_path(), cfg)


def top10_overlap(a, b) -> float:
    """Mean over the (view, query) rankings both reports hold of |top10(a) ∩ top10(b)| / 10."""
    shares = []
    for view, run in a.reports["sample"].runs.items():
        other = b.reports["sample"].runs[view]
        for qid, scores in run.items():
            top = lambda s: set(sorted(s, key=s.get, reverse=True)[:10])  # noqa: E731
            shares.append(len(top(scores) & top(other[qid])) / min(10, len(scores)))
    return sum(shares) / len(shares)


def check_close(reference, other) -> None:
    for key, interval in reference.summary.items():
        assert abs(other.summary[key].mean - interval.mean) <= METRIC_TOLERANCE, (key, interval.mean, other.summary[key].mean)
    assert top10_overlap(reference, other) >= TOP10_OVERLAP


# relative L2 error of a step's whole gradient, bf16 against fp32: rounding the weights and activations
# to bf16 alone moves it by about 2% on this batch (measured: 1.4% at ZeRO 0, 2.2% at ZeRO 1-2)
BF16_TOLERANCE = 0.03


def relative_error(got: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    squared = sum(float((got[k].float() - reference[k]).pow(2).sum()) for k in reference)
    return (squared / sum(float(reference[k].pow(2).sum()) for k in reference)) ** 0.5


def step_gradients(cfg: TrainingConfig, batch, *, dropout: bool = True) -> tuple[float, dict[str, torch.Tensor], tuple]:
    """One micro-batch through `tasks.training.trainer._backward` on a fresh engine: its loss, every
    weight's full gradient (read through DeepSpeed, ZeRO's partitions included, as fp32), and where
    the engine keeps things: (weights' dtype, gradient accumulation dtype, autocast dtype or None).
    Without dropout only the precision differs between two runs."""
    from deepspeed.utils import safe_get_full_grad

    from tasks.training.trainer import _backward, _load, worker_environment

    with worker_environment():
        engine, encoder = _load(cfg, steps=10, world=1)
        engine.train(dropout)
        loss, _ = _backward(engine, encoder, batch, cfg, rank=0, world=1)
        grads = {n: safe_get_full_grad(p).float().clone() for n, p in engine.module.named_parameters()}
        weights, accumulation = engine.get_data_types()
        autocast = engine.torch_autocast_dtype() if engine.torch_autocast_enabled() else None
    return loss, grads, (weights, accumulation, autocast)


def check_bf16_gradients(small, batch, zero: int) -> None:
    """A bf16 step of one-text chunks (some twenty backward passes) against the fp32 step on the
    same device: within BF16_TOLERANCE, and summed in fp32 — ZeRO 1-2 accumulate in fp32 beside
    bf16 weights; stage 0 trains the fp32 weights under bf16 autocast."""
    import torch

    one_text_chunks = {"grad_cache_chunk": 1, "encode_chunk": 1, "zero_stage": zero}
    _, reference, kept = step_gradients(small(precision="fp32", **one_text_chunks), batch, dropout=False)
    assert kept == (torch.float32, torch.float32, None)
    _, bf16, kept = step_gradients(small(precision="bf16", **one_text_chunks), batch, dropout=False)
    assert kept == ((torch.float32, torch.float32, torch.bfloat16) if zero == 0
                    else (torch.bfloat16, torch.float32, None))
    error = relative_error(bf16, reference)
    assert 0 < error < BF16_TOLERANCE, error  # 0 would mean no bf16 ran at all
