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
from dualview_core.evaluation.suites import SuiteReport, plan, single_task_plan, suite_report
from dualview_core.config import EvaluationConfig
from dualview_core.data.catalog import task_named


def report(pmrr: dict[str, float], score: dict[str, float]) -> SuiteReport:
    """A one-task suite `sample` whose task reports these per-query values, with intervals mean ± 1 / ± 2."""
    mean = lambda v: sum(v.values()) / len(v)  # noqa: E731
    summary = {"p-MRR": Interval(mean(pmrr), mean(pmrr) - 1, mean(pmrr) + 1),
               "score": Interval(mean(score), mean(score) - 2, mean(score) + 2)}
    task = EvalReport("followir", "sample", "d1", {"p-MRR": pmrr, "score": score}, summary)
    return suite_report(single_task_plan(task_named("sample")), {"sample": task}, EvaluationConfig())


def test_each_model_gets_its_headline_metrics_with_intervals():
    out = evaluation_headline({"base": report({"a": 0.0, "b": 2.0}, {"a": 50.0, "b": 70.0})})
    assert out == {"base/sample/p-MRR": 1.0, "base/sample/p-MRR_ci_low": 0.0, "base/sample/p-MRR_ci_high": 2.0,
                   "base/sample/score": 60.0, "base/sample/score_ci_low": 58.0, "base/sample/score_ci_high": 62.0}


def test_a_suite_macro_difference_is_stratified_by_task():
    cfg = EvaluationConfig(bootstrap_resamples=0)

    def suite(values: list[dict[str, float]]) -> SuiteReport:
        reports = {t: EvalReport("followir", t, t, {"score": v}, {"score": Interval(sum(v.values()) / len(v), 0, 0)})
                   for t, v in zip(("robust04", "news21", "core17"), values)}
        return suite_report(plan("followir"), reports, cfg)

    base = suite([{"a": 0.0, "b": 0.0, "c": 0.0}, {"x": 0.0}, {"y": 0.0}])
    trained = suite([{"a": 3.0, "b": 3.0, "c": 3.0}, {"x": 0.0}, {"y": 0.0}])
    out = evaluation_headline({"base": base, "trained": trained}, resamples=500)
    assert out["delta/followir/score"] == pytest.approx(1.0)  # (3 + 0 + 0) / 3 tasks, not 9/5 pooled
    assert out["trained/followir/score"] == pytest.approx(1.0)


def test_the_difference_is_paired_over_the_queries_both_scored():
    base = report({"a": 0.0, "b": 2.0, "c": 4.0}, {"a": 50.0, "b": 50.0, "c": 50.0})
    trained = report({"a": 3.0, "b": 5.0, "d": 100.0}, {"a": 50.0, "b": 50.0, "c": 50.0})
    out = evaluation_headline({"base": base, "trained": trained}, resamples=200)
    assert out["delta/sample/p-MRR"] == pytest.approx(3.0)  # (3-0 + 5-2) / 2: query c and d are not paired
    assert out["delta/sample/p-MRR_ci_low"] == pytest.approx(3.0) and out["delta/sample/p-MRR_ci_high"] == pytest.approx(3.0)
    assert out["delta/sample/p-MRR_p_value"] == pytest.approx(0.5)  # exact sign flip on 2 equal differences: 2 of 4
    assert out["delta/sample/score"] == 0.0 and out["delta/sample/score_p_value"] == 1.0
    assert out["trained/sample/p-MRR"] == pytest.approx(36.0)


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
