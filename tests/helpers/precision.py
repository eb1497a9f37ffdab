"""How far an evaluation in a lower precision may move from fp32 on the CPU, on the bundled sample:
the tolerance the CPU and GPU tests both state."""

from __future__ import annotations

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
