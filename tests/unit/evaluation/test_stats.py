"""Bootstrap intervals and the paired test, on values whose answers are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dualview_core.evaluation.stats import bootstrap_ci, paired_test


def test_bootstrap_is_reproducible_under_a_seed_and_moves_with_it():
    values = np.random.default_rng(3).normal(size=50).tolist()
    a, b = bootstrap_ci(values, 500, seed=11), bootstrap_ci(values, 500, seed=11)
    assert a == b
    assert bootstrap_ci(values, 500, seed=12) != a
    assert a.low < a.mean < a.high and a.mean == pytest.approx(np.mean(values))


def test_constant_values_and_zero_resamples_collapse_the_interval():
    c = bootstrap_ci([2.5] * 7, 200, seed=0)
    assert (c.mean, c.low, c.high) == (2.5, 2.5, 2.5)
    z = bootstrap_ci([1.0, 3.0], 0)
    assert (z.mean, z.low, z.high) == (2.0, 2.0, 2.0)
    empty = bootstrap_ci([], 100)
    assert all(math.isnan(v) for v in (empty.mean, empty.low, empty.high))


def test_bootstrap_width_matches_the_normal_approximation():
    values = [0.0, 1.0] * 200  # mean 0.5, standard error sqrt(0.25 / 400) = 0.025
    ci = bootstrap_ci(values, 4000, seed=0)
    assert ci.high - ci.low == pytest.approx(2 * 1.96 * 0.025, rel=0.1)


def test_groups_combine_plainly_or_weighted_by_size():
    groups = [[0.0, 0.0], [10.0, 10.0, 10.0, 10.0]]
    plain = bootstrap_ci(groups, 100, seed=0)
    weighted = bootstrap_ci(groups, 100, seed=0, weighted=True)
    assert (plain.mean, plain.low, plain.high) == (5.0, 5.0, 5.0)  # mean of subset means
    assert weighted.mean == pytest.approx(40 / 6) and weighted.low == pytest.approx(40 / 6)  # pooled mean


def test_paired_test_exact_closed_forms():
    ones, zeros = {q: 1.0 for q in "abcd"}, {q: 0.0 for q in "abcd"}
    # 2**4 sign patterns; only all-plus and all-minus reach |mean| = 1
    result = paired_test(ones, zeros)
    assert result.p_value == 2 / 16 and result.method == "exact sign-flip"
    assert (result.n, result.mean_a, result.mean_b, result.difference.mean) == (4, 1.0, 0.0, 1.0)
    # diffs 1, 2, 3: |±1 ±2 ±3| / 3 >= 2 only for +++ and ---
    assert paired_test({"a": 1, "b": 2, "c": 3}, {"a": 0, "b": 0, "c": 0}).p_value == 2 / 8
    assert paired_test(ones, ones).p_value == 1.0


def test_paired_test_monte_carlo_and_bookkeeping():
    a = {f"q{i}": 1.0 for i in range(30)} | {"only-a": 5.0}
    b = {f"q{i}": 0.0 for i in range(30)} | {"only-b": 5.0, "only-b2": 1.0}
    result = paired_test(a, b, resamples=999, seed=0)
    assert result.p_value == 1 / 1000  # no random sign pattern of 30 reaches the observed mean
    assert (result.n, result.only_a, result.only_b) == (30, 1, 2)
    assert paired_test(a, b, resamples=999, seed=0) == result
    with pytest.raises(ValueError, match="share no query"):
        paired_test({"x": 1.0}, {"y": 1.0})
