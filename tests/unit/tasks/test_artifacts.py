"""A flow run's artifacts from what its stages return: keys, table rows, summaries, MLflow links.

The inputs have the shapes the flows hand over: report.json's dict (`SuiteReport.as_dict`, here the
bundled sample's evaluation of MiniLM, numbers cut short), `run_synthesis`'s summary, `train_tracked`'s
result, the pipeline's headline.
"""

from __future__ import annotations

import re

from tasks.artifacts import (DIFFERENCE, MLFLOW_RUN, RESULTS, SUMMARY, SYNTHESIS, TRAINING, Markdown, Table,
                             artifact_key, evaluate_artifacts, evaluation_rows, mlflow_run_url, pipeline_artifacts,
                             sweep_artifacts, synthesis_rows, synthesize_artifacts, train_artifacts, training_rows)
from tasks.tracking.runs import RunRef

COLUMNS = {"sample/p-MRR": "p-MRR", "sample/score": "Score", "sample/score_mteb1": "Score (mteb 1.x)"}


def _report(pmrr: float, score: float) -> dict:
    """The shape of `SuiteReport.as_dict(with_per_query=False)` for the bundled sample."""
    metric = lambda v, half: {"value": v, "ci_low": v - half, "ci_high": v + half, "queries": 23}  # noqa: E731
    metrics = {"sample/p-MRR": metric(pmrr, 6.25), "sample/score": metric(score, 4.0), "sample/score_mteb1": metric(66.5, 7.0)}
    return {"suite": "sample", "digest": "077ebfeef67200c2", "columns": COLUMNS, "metrics": metrics,
            "details": {"query_template": "{query} {instruction}"},
            "tasks": {"sample": {"benchmark": "followir", "metrics": {}, "details": {"quarantined": 0}}}}


FOLLOWIR = {  # a suite of three tasks: per task and the macro, one undefined
    "suite": "followir", "columns": {"followir/p-MRR": "FollowIR p-MRR", "followir/score": "FollowIR Score"},
    "metrics": {"followir/robust04/p-MRR": {"value": 1.0, "ci_low": 0.5, "ci_high": 1.5, "queries": 52},
                "followir/core17/p-MRR": {"value": 3.0, "ci_low": 2.0, "ci_high": 4.0, "queries": 20},
                "followir/news21/p-MRR": {"value": None, "ci_low": None, "ci_high": None, "queries": 0},
                "followir/p-MRR": {"value": 2.0, "ci_low": 1.123456789, "ci_high": 2.9, "queries": 72}},
}

SUMMARY_OF_SYNTHESIS = {  # run_synthesis's summary, as the synthesize flow returns it
    "seeds": {"rows": 12, "valid": 11, "quarantined": 1, "by_reason": {"empty_text": 1}, "instruct": 8,
              "non_instruct": 3, "with_instruction_negatives": 8},
    "synthesis_seeds": 8,
    "plan": {"pending": 6, "cached": 2, "new": 6, "changed": 0, "removed": 0, "unchanged": 2},
    "cost": {"engine_rows": 6, "accepted": 2, "acceptance_rate": 0.3333, "rejections": {"chatter": 1, "no_answer": 3},
             "prompt_tokens": 4100, "completion_tokens": 310, "attempts": 6, "engine_seconds": 40.25, "wall_seconds": 95.5,
             "rows_per_s": 0.063, "tokens_per_s": 46.2, "first_answers_s": 61.0, "steady_rows_per_s": 0.5,
             "verify_rows": 0, "verify_prompt_tokens": 0, "verify_completion_tokens": 0, "verify_checked": 0,
             "verify_failed": 0, "verify_disagreement_rate": None},
    "dual_views": 3, "rejected": 5,
    "outcomes": {"accepted": 3, "rejected": 5, "by_reason": {"chatter": 1, "no_answer": 4}},
    "report": "/runs/synthesis/report.md", "verify_retry": 0,
    "prompt_version": "3f2a9c", "model_id": "smollm2", "seed_fingerprint": "ab12", "source_fingerprint": "cd34",
    "outputs_fingerprint": "ef56", "out": "/runs/synthesis",
}

TRAINED = {  # train_tracked's result
    "checkpoint": "/runs/models/r1", "steps": 2, "seconds": 30.25, "digest": "d1g35t",
    "composition": {"mixture": "ins-orig", "rows": 4, "size_n": 4, "by_source": {"instruct": 4, "dual_view": 0},
                    "distinct_queries": 4, "distinct_seeds": 4, "corrupted": 0, "heldout_pairs": 2, "unmatched_dual_views": 0},
    "history": [{"step": 0, "train/total_steps": 2}, {"step": 0, "train/instruction_separation": 0.01},
                {"step": 1, "train/loss": 1.5, "train/lr": 1e-5, "train/samples_per_s": 2.0, "train/tokens_per_s": 100.0,
                 "train/peak_rss_mb": 900.5},
                {"step": 2, "train/loss": 1.25, "train/lr": 2e-5, "train/samples_per_s": 3.0, "train/tokens_per_s": 150.0,
                 "train/peak_rss_mb": 1024.25},
                {"step": 2, "train/instruction_separation": 0.02}],
}

HEADLINE = {"trained/sample/p-MRR": -8.0, "base/sample/p-MRR": -10.75, "delta/sample/p-MRR": 2.75,
            "delta/sample/p-MRR_ci_low": -1.0, "delta/sample/p-MRR_ci_high": 6.5, "delta/sample/p-MRR_p_value": 0.1234567,
            "delta/sample/score": -0.5, "delta/sample/score_ci_low": -2.0, "delta/sample/score_ci_high": 1.0,
            "delta/sample/score_p_value": 0.5, "train/final_loss": 1.25, "train/steps": 2.0}
HTTP_RUN = RunRef("http://127.0.0.1:5000", "7", "0a1b2c")


def test_keys_are_what_prefect_accepts_and_stable_per_scope():
    assert artifact_key("pipeline", RESULTS) == "dualview-pipeline-results"
    assert artifact_key("Pipeline K8s_2", MLFLOW_RUN) == "dualview-pipeline-k8s-2-mlflow-run"
    for scope in ("evaluate", "watch-seeds", "My Deployment!", "sweep-k8s"):
        for kind in (RESULTS, SUMMARY, SYNTHESIS, TRAINING, MLFLOW_RUN):
            assert re.fullmatch(r"[a-z0-9-]+", artifact_key(scope, kind))


def test_evaluation_rows_hold_every_metric_with_its_interval():
    rows = evaluation_rows({"minilm": _report(-10.80745341614907, 87.14285714285714)})
    assert rows == [
        {"model": "minilm", "metric": "sample/p-MRR", "value": -10.8075, "ci_low": -17.0575, "ci_high": -4.5575, "queries": 23},
        {"model": "minilm", "metric": "sample/score", "value": 87.1429, "ci_low": 83.1429, "ci_high": 91.1429, "queries": 23},
        {"model": "minilm", "metric": "sample/score_mteb1", "value": 66.5, "ci_low": 59.5, "ci_high": 73.5, "queries": 23},
    ]


def test_evaluation_rows_have_each_task_and_the_suite_and_say_undefined_as_none():
    rows = evaluation_rows({"m": FOLLOWIR})
    assert [r["metric"] for r in rows] == ["followir/robust04/p-MRR", "followir/core17/p-MRR", "followir/news21/p-MRR",
                                          "followir/p-MRR"]
    assert rows[2] == {"model": "m", "metric": "followir/news21/p-MRR", "value": None, "ci_low": None, "ci_high": None,
                       "queries": 0}
    assert rows[3]["ci_low"] == 1.1235


def test_the_pipeline_table_adds_the_paired_difference_with_its_p_value():
    rows = evaluation_rows({"base": _report(-10.75, 87.0), "trained": _report(-8.0, 86.5)}, HEADLINE)
    assert len(rows) == 3 + 3 + 2  # no difference for a column the headline does not compare
    assert all(set(r) == {"model", "metric", "value", "ci_low", "ci_high", "queries", "p_value"} for r in rows)
    assert rows[0] == {"model": "base", "metric": "sample/p-MRR", "value": -10.75, "ci_low": -17.0, "ci_high": -4.5,
                       "queries": 23, "p_value": None}
    assert rows[6:] == [
        {"model": DIFFERENCE, "metric": "sample/p-MRR", "value": 2.75, "ci_low": -1.0, "ci_high": 6.5, "queries": None,
         "p_value": 0.1235},
        {"model": DIFFERENCE, "metric": "sample/score", "value": -0.5, "ci_low": -2.0, "ci_high": 1.0, "queries": None,
         "p_value": 0.5},
    ]


def test_synthesis_rows_put_the_outcomes_first_then_this_runs_cost():
    rows = {r["measure"]: r["value"] for r in synthesis_rows(SUMMARY_OF_SYNTHESIS)}
    assert list(rows)[:5] == ["synthesis/dual_views", "synthesis/rejected", "synthesis/outcomes/chatter",
                              "synthesis/outcomes/no_answer", "synthesis/quarantined_seeds"]
    assert rows["synthesis/dual_views"] == 3 and rows["synthesis/rejected"] == 5 and rows["synthesis/outcomes/no_answer"] == 4
    assert rows["synthesis/rejections/no_answer"] == 3  # this run's answers only
    assert rows["synthesis/engine_rows"] == 6 and rows["synthesis/accepted"] == 2
    assert rows["synthesis/prompt_tokens"] == 4100 and rows["synthesis/completion_tokens"] == 310
    assert rows["synthesis/wall_seconds"] == 95.5 and rows["synthesis/plan/cached"] == 2
    assert "synthesis/verify_disagreement_rate" not in rows  # None is no number


def test_training_rows_hold_steps_final_loss_throughput_and_the_mixture():
    assert training_rows(TRAINED) == [
        {"measure": "train/steps", "value": 2.0},
        {"measure": "train/final_loss", "value": 1.25},
        {"measure": "train/seconds", "value": 30.25},
        {"measure": "train/samples_per_s_mean", "value": 2.5},
        {"measure": "train/tokens_per_s_mean", "value": 125.0},
        {"measure": "train/peak_rss_mb", "value": 1024.25},  # the largest step's; no CUDA, no accelerator row
        {"measure": "train/instruction_separation", "value": 0.02},
        {"measure": "mixture/mixture", "value": "ins-orig"},
        {"measure": "mixture/rows", "value": 4},
        {"measure": "mixture/size_n", "value": 4},
        {"measure": "mixture/distinct_queries", "value": 4},
        {"measure": "mixture/distinct_seeds", "value": 4},
        {"measure": "mixture/corrupted", "value": 0},
        {"measure": "mixture/heldout_pairs", "value": 2},
        {"measure": "mixture/unmatched_dual_views", "value": 0},
        {"measure": "mixture/by_source/instruct", "value": 4},
        {"measure": "mixture/by_source/dual_view", "value": 0},
    ]


def test_a_resumed_run_that_trained_nothing_has_no_loss_row():
    rows = training_rows({**TRAINED, "history": []})
    assert [r["measure"] for r in rows][:3] == ["train/steps", "train/seconds", "mixture/mixture"]


def test_the_mlflow_link_is_the_runs_page_without_credentials_and_none_for_a_local_store():
    assert mlflow_run_url("https://alice:s3cret@mlflow.example:8443/mlflow/", "3", "abc") == (
        "https://mlflow.example:8443/mlflow/#/experiments/3/runs/abc")
    assert mlflow_run_url("sqlite:////work/.cache/mlflow/mlflow.db", "3", "abc") is None
    assert mlflow_run_url("/work/mlruns", "3", "abc") is None


def test_an_evaluate_run_leaves_a_table_a_summary_and_a_link():
    table, summary, link = evaluate_artifacts("evaluate", "minilm", _report(-10.8, 87.1), "/eval/0a1b2c", HTTP_RUN)
    assert isinstance(table, Table) and table.key == "dualview-evaluate-results" and len(table.rows) == 3
    assert isinstance(summary, Markdown) and summary.key == "dualview-evaluate-summary"
    assert "| model | p-MRR | Score | Score (mteb 1.x) |" in summary.text
    assert "| minilm | -10.80 [-17.05, -4.55] | 87.10 [83.10, 91.10] | 66.50 [59.50, 73.50] |" in summary.text
    assert "[MLflow run 0a1b2c](http://127.0.0.1:5000/#/experiments/7/runs/0a1b2c)" in summary.text
    assert "`/eval/0a1b2c`" in summary.text
    assert (link.key, link.url, link.text) == ("dualview-evaluate-mlflow-run",
                                                "http://127.0.0.1:5000/#/experiments/7/runs/0a1b2c", "MLflow run 0a1b2c")
    assert link.description


def test_a_training_run_that_registered_its_model_links_the_version():
    *_, run_link, version = train_artifacts("train-k8s", TRAINED, HTTP_RUN, {"name": "dualview-all-dv-minilm", "version": "3"})
    assert run_link.key == "dualview-train-k8s-mlflow-run"
    assert (version.key, version.url, version.text) == (
        "dualview-train-k8s-model-version", "http://127.0.0.1:5000/#/models/dualview-all-dv-minilm/versions/3",
        "dualview-all-dv-minilm version 3")


def test_a_run_on_a_local_mlflow_store_names_the_run_instead_of_linking():
    local = RunRef("sqlite:///tmp/mlflow.db", "1", "ff00")
    artifacts = train_artifacts("train", TRAINED, local)
    assert [type(a) for a in artifacts] == [Table, Markdown]
    assert "MLflow run `ff00`, experiment 1, in a local store: `mlflow ui --backend-store-uri sqlite:///tmp/mlflow.db`" in artifacts[1].text
    assert "2 optimizer steps in 30.2 s, final loss 1.2500, 2.5 samples/s" in artifacts[1].text


def test_a_synthesize_run_has_no_mlflow_run_to_link():
    table, summary = synthesize_artifacts("synthesize-k8s", SUMMARY_OF_SYNTHESIS)
    assert table.key == "dualview-synthesize-k8s-results" and summary.key == "dualview-synthesize-k8s-summary"
    assert ("3 dual views accepted, 5 rejected (no_answer 4, chatter 1) over the current seeds. This run sent 6 rows "
            "to the engine (4100 prompt + 310 completion tokens, 95.5 s); 2 answers came from the cache.") in summary.text


def test_a_pipeline_run_leaves_its_results_synthesis_training_summary_and_link():
    reports = {"base": _report(-10.75, 87.0), "trained": _report(-8.0, 86.5)}
    artifacts = pipeline_artifacts("pipeline", HTTP_RUN, SUMMARY_OF_SYNTHESIS, TRAINED, reports, HEADLINE)
    assert [a.key for a in artifacts] == ["dualview-pipeline-results", "dualview-pipeline-synthesis",
                                          "dualview-pipeline-training", "dualview-pipeline-summary",
                                          "dualview-pipeline-mlflow-run"]
    assert artifacts[0].rows == evaluation_rows(reports, HEADLINE)
    text = artifacts[3].text
    assert "| trained-base | 2.75 [-1.00, 6.50] (p 0.123) | -0.50 [-2.00, 1.00] (p 0.500) | n/a |" in text
    assert "**Training** of mixture `ins-orig` (4 rows)" in text and "**Synthesis** into `/runs/synthesis`" in text


def test_a_sweep_run_has_a_row_per_grid_point_and_metric():
    points = [{"name": "ins-orig-s0", "mixture": "ins-orig", "run_id": "r1", "metrics": _report(-9.0, 86.0)["metrics"]},
              {"name": "ins-dv-s0", "mixture": "ins-dv", "run_id": "r2", "metrics": _report(-7.0, 86.0)["metrics"]}]
    table, synthesis, summary, link = sweep_artifacts("sweep", HTTP_RUN, SUMMARY_OF_SYNTHESIS, _report(-10.0, 87.0), points)
    assert [(r["model"], r["metric"], r["value"]) for r in table.rows if r["metric"] == "sample/p-MRR"] == [
        ("base", "sample/p-MRR", -10.0), ("ins-orig-s0", "sample/p-MRR", -9.0), ("ins-dv-s0", "sample/p-MRR", -7.0)]
    assert synthesis.key == "dualview-sweep-synthesis" and "| ins-dv-s0 | -7.00 [-13.25, -0.75] |" in summary.text
