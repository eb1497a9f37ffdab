"""Headline numbers of a pipeline run: names, intervals, the paired trained − base difference."""

from __future__ import annotations

import pytest

from dualview_core.evaluation.scoring import EvalReport
from dualview_core.evaluation.headline import (
    FINAL_LOSS,
    SYNTHESIS_ACCEPTANCE,
    TRAIN_STEPS,
    evaluation_headline,
    synthesis_headline,
    training_headline,
)
from dualview_core.evaluation.stats import Interval


def report(pmrr: dict[str, float], score: dict[str, float]) -> EvalReport:
    mean = lambda v: sum(v.values()) / len(v)  # noqa: E731
    summary = {"p-MRR": Interval(mean(pmrr), mean(pmrr) - 1, mean(pmrr) + 1),
               "score": Interval(mean(score), mean(score) - 2, mean(score) + 2)}
    return EvalReport("followir", "sample", "d1", {"p-MRR": pmrr, "score": score}, summary)


def test_each_model_gets_its_headline_metrics_with_intervals():
    out = evaluation_headline({"base": report({"a": 0.0, "b": 2.0}, {"a": 50.0, "b": 70.0})})
    assert out == {"base/p-MRR": 1.0, "base/p-MRR_ci_low": 0.0, "base/p-MRR_ci_high": 2.0,
                   "base/score": 60.0, "base/score_ci_low": 58.0, "base/score_ci_high": 62.0}


def test_the_difference_is_paired_over_the_queries_both_scored():
    base = report({"a": 0.0, "b": 2.0, "c": 4.0}, {"a": 50.0, "b": 50.0, "c": 50.0})
    trained = report({"a": 3.0, "b": 5.0, "d": 100.0}, {"a": 50.0, "b": 50.0, "c": 50.0})
    out = evaluation_headline({"base": base, "trained": trained}, resamples=200)
    assert out["delta/p-MRR"] == pytest.approx(3.0)  # (3-0 + 5-2) / 2: query c and d are not paired
    assert out["delta/p-MRR_ci_low"] == pytest.approx(3.0) and out["delta/p-MRR_ci_high"] == pytest.approx(3.0)
    assert out["delta/p-MRR_p_value"] == pytest.approx(0.5)  # exact sign flip on 2 equal differences: 2 of 4
    assert out["delta/score"] == 0.0 and out["delta/score_p_value"] == 1.0
    assert out["trained/p-MRR"] == pytest.approx(36.0)


def test_synthesis_acceptance_counts_cached_answers_and_cost_is_this_runs():
    summary = {"dual_views": 6, "rejected": 60, "cost": {"engine_rows": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                                         "wall_seconds": 1.5, "acceptance_rate": None}}
    out = synthesis_headline(summary)
    assert out == {SYNTHESIS_ACCEPTANCE: pytest.approx(6 / 66), "synthesis/dual_views": 6.0, "synthesis/engine_rows": 0.0,
                   "synthesis/prompt_tokens": 0.0, "synthesis/completion_tokens": 0.0, "synthesis/wall_seconds": 1.5}
    assert SYNTHESIS_ACCEPTANCE not in synthesis_headline({"dual_views": 0, "rejected": 0, "cost": {}})


def test_training_headline_is_the_last_loss_logged():
    history = [{"step": 0, "train/total_steps": 3}, {"step": 1, "train/loss": 2.0}, {"step": 3, "train/loss": 0.5},
               {"step": 3, "train/instruction_separation": 0.1}]
    assert training_headline(history, 3, "train/loss") == {TRAIN_STEPS: 3.0, FINAL_LOSS: 0.5}
    assert training_headline([], 3, "train/loss") == {TRAIN_STEPS: 3.0}  # a published run returns no history
