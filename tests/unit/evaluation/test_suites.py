"""Suites: the catalog's tasks combined into the names users compare runs on, with hand-computed means."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dualview_core.config import EvaluationConfig
from dualview_core.contracts import EVAL_CORPUS, EVAL_QRELS, EVAL_QUERIES, EvalSet
from dualview_core.evaluation.benchmarks import SCORE_MEASURE
from dualview_core.evaluation.scoring import evaluate_runs
from dualview_core.evaluation.stats import paired_macro_test
from dualview_core.evaluation.suites import plan, single_task_plan, suite_report
from dualview_core.data.catalog import Task
from dualview_core.method.metrics import P_MRR, SCORE

CFG = EvaluationConfig(bootstrap_resamples=200)


def followir(name: str, rel: int, measure: str = "map_cut_1000") -> EvalSet:
    """One query `a`: d1 judged `rel` under both instructions, d2 relevant under the og one only."""
    return EvalSet(
        name,
        pa.Table.from_pylist([{"doc_id": d, "title": "", "text": d} for d in ("d1", "d2")], schema=EVAL_CORPUS),
        pa.Table.from_pylist([{"query_id": "a", "group_id": "a", "view": v, "query": "q", "instruction": v}
                              for v in ("og", "changed")], schema=EVAL_QUERIES),
        pa.Table.from_pylist([{"query_id": "a", "view": v, "doc_id": "d1", "relevance": rel} for v in ("og", "changed")]
                             + [{"query_id": "a", "view": "og", "doc_id": "d2", "relevance": 1}], schema=EVAL_QRELS),
        meta={SCORE_MEASURE: measure},
    )


RUNS = {"og": {"a": {"d1": 0.9, "d2": 0.5}}, "changed": {"a": {"d1": 0.9, "d2": 0.1}}}


def test_the_paper_suite_shows_table_one():
    assert list(plan("paper").columns().values()) == [
        "FollowIR p-MRR", "FollowIR Score", "InfoSearch length", "InfoSearch keyword", "MAIR IFEval", "MAIR InstructIR"]
    assert list(plan("paper").columns()) == [
        "followir/p-MRR", "followir/score", "infosearch/length/p-MRR", "infosearch/keyword/p-MRR",
        "mair/ifeval/ndcg@10", "mair/instructir/ndcg@10"]


def test_followir_macro_is_the_plain_mean_of_its_tasks():
    reports = {"robust04": evaluate_runs(followir("robust04", 1), RUNS, CFG, "followir"),
               "news21": evaluate_runs(followir("news21", 0, "ndcg_cut_5"), RUNS, CFG, "followir"),
               "core17": evaluate_runs(followir("core17", 0), RUNS, CFG, "followir")}
    # og run: d1 at 1, d2 at 2. robust04: both relevant, MAP 1; news21/core17: d2 alone at rank 2
    assert reports["robust04"].summary[SCORE].mean == pytest.approx(100.0)
    assert reports["core17"].summary[SCORE].mean == pytest.approx(50.0)
    assert reports["news21"].summary[SCORE].mean == pytest.approx(100 / 1.5849625007211563 / 1.0)  # nDCG@5: 1/log2(3)
    report = suite_report(plan("followir"), reports, CFG)
    assert report.summary["followir/robust04/score"].mean == pytest.approx(100.0)
    expected = (100.0 + 100 / 1.5849625007211563 + 50.0) / 3
    assert report.summary["followir/score"].mean == pytest.approx(expected)
    assert report.headline == ("followir/p-MRR", "followir/score")
    assert len(report.groups["followir/score"]) == 3


def test_macro_interval_resamples_inside_each_task():
    reports = {t: evaluate_runs(followir(t, 1), RUNS, CFG, "followir") for t in ("robust04", "news21", "core17")}
    report = suite_report(plan("followir"), reports, CFG)
    interval = report.summary["followir/score"]
    assert interval.low == interval.high == interval.mean == pytest.approx(100.0)  # one query per task: no spread


def test_a_suite_missing_a_task_reports_the_tasks_it_has_and_no_macro_over_one():
    reports = {"robust04": evaluate_runs(followir("robust04", 1), RUNS, CFG, "followir")}
    report = suite_report(plan("followir"), reports, CFG)
    assert "followir/robust04/score" in report.summary and "followir/score" not in report.summary
    assert report.headline == ()


def test_a_single_folder_is_a_one_task_suite_named_after_it():
    task = Task(name="mine", benchmark="followir", title="mine")
    report = suite_report(single_task_plan(task), {"mine": evaluate_runs(followir("mine", 1), RUNS, CFG, "followir")}, CFG)
    assert set(report.summary) >= {"mine/p-MRR", "mine/score"}
    assert report.as_dict()["per_query"]["mine/p-MRR"] == report.reports["mine"].per_query[P_MRR]


def test_paired_macro_test_weighs_tasks_equally():
    a = [{"q1": 1.0, "q2": 1.0, "q3": 1.0}, {"x": 0.0}]
    b = [{"q1": 0.0, "q2": 0.0, "q3": 0.0}, {"x": 0.0}]
    result = paired_macro_test(a, b, resamples=2000)
    assert result.difference.mean == pytest.approx(0.5)  # (1 + 0) / 2, not 3/4 pooled
    assert result.mean_a == pytest.approx(0.5) and result.n == 4
    assert 0 < result.p_value <= 1
    with pytest.raises(ValueError, match="share no query"):
        paired_macro_test([{"a": 1.0}], [{"b": 1.0}])
