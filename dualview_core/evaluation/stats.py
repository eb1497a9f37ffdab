"""Uncertainty over queries: bootstrap confidence intervals and a paired test between two systems.

Owns resampling. Queries are the unit: a benchmark's mean is a mean over queries, so its
uncertainty is the spread of that mean when the queries are drawn again. It knows nothing about
which measure the values came from, runs, files or services.

- `bootstrap_ci`: percentile bootstrap of the mean. With several groups (FollowIR's subsets, MAIR's
  splits) it resamples inside each group, so group sizes stay fixed, and combines the group means as
  the benchmark does: plain mean, or weighted by group size.
- `paired_test`: a two-sided sign-flip randomization test on per-query differences (exact
  enumeration up to 16 queries, Monte Carlo beyond), plus a bootstrap interval of the difference.
- `paired_macro_test`: the same for a macro over groups (a suite's tasks): signs flip per query
  inside each group, the statistic is the plain mean of the groups' mean differences.

    >>> paired_test({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}, {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}).p_value
    0.125
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

EXACT_UP_TO = 16  # 2**16 sign patterns: exact enumeration is cheaper than sampling
_CHUNK = 4_000_000  # index entries drawn at once: bounds bootstrap memory at ~64 MB


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        """The names metrics carry everywhere else (CLI JSON, MLflow): value, ci_low, ci_high."""
        return {"value": self.mean, "ci_low": self.low, "ci_high": self.high}


def _group_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples,) means of `values` resampled with replacement, drawn in memory-bounded chunks."""
    n = len(values)
    per_chunk = max(1, _CHUNK // n)
    out = []
    for start in range(0, resamples, per_chunk):
        size = min(per_chunk, resamples - start)
        idx = rng.integers(0, n, size=(size, n))  # (size, n)
        out.append(values[idx].mean(axis=1))  # (size,)
    return np.concatenate(out)


def combine(means: Sequence[float] | np.ndarray, sizes: Sequence[int], weighted: bool) -> np.ndarray:
    """Group means (groups on axis 0) -> the benchmark mean: plain or weighted by group size."""
    means = np.asarray(means, dtype=np.float64)  # (groups, ...)
    if not weighted:
        return means.mean(axis=0)
    w = np.asarray(sizes, dtype=np.float64) / sum(sizes)  # (groups,)
    return np.tensordot(w, means, axes=1)


def bootstrap_ci(groups: Sequence[Sequence[float]] | Sequence[float], resamples: int = 1000, seed: int = 0,
                 confidence: float = 0.95, weighted: bool = False) -> Interval:
    """Mean and percentile interval. `groups` is one list of per-query values or a list of them.

    Empty groups are ignored; with no values at all every field is NaN; with resamples=0 the
    interval collapses to the mean."""
    if len(groups) and not isinstance(groups[0], (Sequence, np.ndarray)):
        groups = [groups]
    arrays = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]  # each (n_group,)
    if not arrays:
        return Interval(float("nan"), float("nan"), float("nan"))
    sizes = [len(a) for a in arrays]
    mean = float(combine([a.mean() for a in arrays], sizes, weighted))
    if resamples <= 0:
        return Interval(mean, mean, mean)
    rng = np.random.default_rng(seed)
    draws = combine([_group_means(a, resamples, rng) for a in arrays], sizes, weighted)  # (resamples,)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(mean, float(low), float(high))


@dataclass(frozen=True)
class PairedResult:
    n: int  # queries in both
    mean_a: float
    mean_b: float
    difference: Interval  # of mean(a - b)
    p_value: float  # two-sided, H0: a and b are exchangeable per query
    method: str
    only_a: int  # queries only one side has (not compared)
    only_b: int

    def as_dict(self) -> dict:
        out = asdict(self)
        out["difference"] = self.difference.as_dict()
        return out


def _sign_flip_p(diff: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float, str]:
    n = len(diff)
    observed = abs(diff.mean())
    tolerance = 1e-12 * max(1.0, observed)  # equal means must count as "as extreme"
    if n <= EXACT_UP_TO:
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1  # (2**n, n) all signs
        flipped = np.abs((patterns * diff).mean(axis=1))  # (2**n,)
        return float((flipped >= observed - tolerance).mean()), "exact sign-flip"
    signs = rng.choice(np.array([-1.0, 1.0]), size=(resamples, n))  # (resamples, n)
    flipped = np.abs((signs * diff).mean(axis=1))  # (resamples,)
    hits = int((flipped >= observed - tolerance).sum())
    return (hits + 1) / (resamples + 1), f"sign-flip, {resamples} resamples"


def paired_test(a: Mapping[str, float], b: Mapping[str, float], resamples: int = 10_000, seed: int = 0,
                confidence: float = 0.95) -> PairedResult:
    """Compare two systems on the queries both were scored on."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two systems share no query: nothing to compare")
    x = np.array([a[q] for q in common], dtype=np.float64)  # (n,)
    y = np.array([b[q] for q in common], dtype=np.float64)  # (n,)
    diff = x - y  # (n,)
    rng = np.random.default_rng(seed)
    p_value, method = _sign_flip_p(diff, max(resamples, 1), rng)
    interval = bootstrap_ci(diff.tolist(), resamples=resamples, seed=seed, confidence=confidence)
    return PairedResult(len(common), float(x.mean()), float(y.mean()), interval, p_value, method,
                        len(set(a) - set(b)), len(set(b) - set(a)))


def paired_macro_test(a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]], resamples: int = 10_000,
                      seed: int = 0, confidence: float = 0.95) -> PairedResult:
    """Compare two systems on a macro average: group i of `a` is paired with group i of `b`."""
    if len(a) != len(b):
        raise ValueError(f"the two systems have {len(a)} and {len(b)} groups")
    commons = [sorted(set(x) & set(y)) for x, y in zip(a, b)]
    kept = [i for i, c in enumerate(commons) if c]
    if not kept:
        raise ValueError("the two systems share no query: nothing to compare")
    xs = [np.array([a[i][q] for q in commons[i]]) for i in kept]  # each (n_i,)
    ys = [np.array([b[i][q] for q in commons[i]]) for i in kept]
    diffs = [x - y for x, y in zip(xs, ys)]
    observed = abs(float(np.mean([d.mean() for d in diffs])))
    tolerance = 1e-12 * max(1.0, observed)
    rng = np.random.default_rng(seed)
    n = max(resamples, 1)
    flipped = np.zeros(n)  # (resamples,) the macro under random signs
    for d in diffs:
        signs = rng.choice(np.array([-1.0, 1.0]), size=(n, len(d)))  # (resamples, n_i)
        flipped += (signs * d).mean(axis=1) / len(diffs)
    p_value = (int((np.abs(flipped) >= observed - tolerance).sum()) + 1) / (n + 1)
    interval = bootstrap_ci([d.tolist() for d in diffs], resamples=resamples, seed=seed, confidence=confidence)
    only_a = sum(len(set(a[i]) - set(b[i])) for i in range(len(a)))
    only_b = sum(len(set(b[i]) - set(a[i])) for i in range(len(a)))
    return PairedResult(sum(len(d) for d in diffs), float(np.mean([x.mean() for x in xs])), float(np.mean([y.mean() for y in ys])),
                        interval, p_value, f"stratified sign-flip, {n} resamples", only_a, only_b)
