"""Evaluation logged into a real MLflow server (SQLite store, started here on 127.0.0.1), read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from dualview_core.config import EvaluationConfig
from dualview_core.contracts import EVAL_CORPUS, EVAL_QRELS, EVAL_QUERIES, EvalSet
from dualview_core.evaluation.scoring import evaluate_runs
from tests.helpers.services import free_port, wait_for_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    root = Path(tmp_path_factory.mktemp("mlflow"))
    port = free_port()
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    cmd = [str(mlflow_bin), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
           "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with open(root / "server.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, timeout=180)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def tracking(mlflow_server, monkeypatch):
    """The client pointed at the server; afterwards, no tracking URI or experiment leaks out (set_experiment
    keeps the experiment in a module global and in MLFLOW_EXPERIMENT_ID)."""
    import mlflow
    from mlflow.tracking import fluent

    before, saved_env = mlflow.get_tracking_uri(), os.environ.get("MLFLOW_EXPERIMENT_ID")
    monkeypatch.setattr(fluent, "_active_experiment_id", None)
    mlflow.set_tracking_uri(mlflow_server)
    try:
        yield mlflow.MlflowClient(mlflow_server)
    finally:
        mlflow.set_tracking_uri(before)
        os.environ.pop("MLFLOW_EXPERIMENT_ID", None) if saved_env is None else os.environ.update(MLFLOW_EXPERIMENT_ID=saved_env)


def eval_set(name: str) -> EvalSet:
    """Three queries; under the changed instruction d1 stops being relevant to each."""
    queries = [{"query_id": q, "group_id": q, "view": v, "query": f"query {q}", "instruction": v}
               for q in ("q1", "q2", "q3") for v in ("og", "changed")]
    qrels = [{"query_id": q, "view": v, "doc_id": d, "relevance": int(d != "d3" and not (v == "changed" and d == "d1"))}
             for q in ("q1", "q2", "q3") for v in ("og", "changed") for d in ("d1", "d2", "d3")]
    corpus = [{"doc_id": d, "title": "", "text": f"text {d}"} for d in ("d1", "d2", "d3")]
    return EvalSet(name, pa.Table.from_pylist(corpus, schema=EVAL_CORPUS),
                   pa.Table.from_pylist(queries, schema=EVAL_QUERIES), pa.Table.from_pylist(qrels, schema=EVAL_QRELS))


RUN_OG = {"q1": {"d1": 0.9, "d2": 0.5, "d3": 0.1}, "q2": {"d1": 0.5, "d2": 0.9, "d3": 0.1}, "q3": {"d1": 0.1, "d2": 0.5, "d3": 0.9}}
RUN_CHANGED = {"q1": {"d1": 0.1, "d2": 0.5, "d3": 0.9}, "q2": {"d1": 0.9, "d2": 0.5, "d3": 0.1}, "q3": {"d1": 0.1, "d2": 0.5, "d3": 0.9}}


def test_metrics_tables_figure_and_lineage_read_back(tracking, tmp_path):
    import mlflow

    from tasks.evaluation.runner import log_evaluation

    from dualview_core.data.catalog import task_named
    from dualview_core.evaluation.benchmarks import SCORE_MEASURE
    from dualview_core.evaluation.suites import plan, suite_report

    cfg = EvaluationConfig(bootstrap_resamples=200)
    reports = []
    for name in ("core17", "news21"):
        es = eval_set(name)
        es.meta[SCORE_MEASURE] = task_named(name).score
        report = evaluate_runs(es, {"og": RUN_OG, "changed": RUN_CHANGED}, cfg)
        report.details["source"] = str(tmp_path / name)
        reports.append(report)
    suite = suite_report(plan("followir"), {r.subset: r for r in reports}, cfg)  # robust04 not given
    # hand-computed: d1 goes 1->3 (q1: +2/3), 2->1 (q2: -1/2), 3->3 (q3: 0)
    assert reports[0].summary["p-MRR"].mean == pytest.approx(100 * (2 / 3 - 1 / 2) / 3)

    from tasks.tracking.mlflow_access import experiment_id, open_run

    uri = tracking.tracking_uri
    experiment = experiment_id(uri, "eval-logging")
    run_id = open_run(uri, experiment, "evaluate")
    logged = log_evaluation(uri, run_id, suite)
    assert mlflow.active_run() is None  # by id: MLflow's process-wide active run is never set

    runs = tracking.search_runs([experiment])
    assert [r.info.run_id for r in runs] == [run_id]  # logged into the run it was given, no other
    metrics = runs[0].data.metrics
    assert metrics == pytest.approx(logged)
    for r in reports:
        for metric in ("p-MRR", "score", "score_mteb1"):
            key = f"followir/{r.subset}/{metric}"
            assert metrics[key] == pytest.approx(r.summary[metric].mean)
            assert metrics[key + "_ci_low"] <= metrics[key] <= metrics[key + "_ci_high"]
    assert metrics["followir/score"] == pytest.approx((reports[0].summary["score"].mean + reports[1].summary["score"].mean) / 2)
    assert metrics["followir/p-MRR"] == pytest.approx(reports[0].summary["p-MRR"].mean)  # same runs, same p-MRR
    assert runs[0].data.params["eval/news21/score_measure"] == "ndcg_cut_5"
    assert runs[0].data.params["eval/core17/score_measure"] == "map_cut_1000"
    assert runs[0].data.params["eval/suite"] == "followir" and "mteb 1.x" in runs[0].data.params["eval/score_convention"]

    inputs = {d.dataset.name: d for d in runs[0].inputs.dataset_inputs}
    assert {n: d.dataset.digest for n, d in inputs.items()} == {f"followir/{r.subset}": r.digest for r in reports}
    assert {t.value for d in inputs.values() for t in d.tags if t.key == "mlflow.data.context"} == {"eval"}

    artifacts = {a.path for a in tracking.list_artifacts(run_id, "evaluation")}
    assert artifacts == {"evaluation/ci.png", "evaluation/core17_per_query.json", "evaluation/news21_per_query.json"}
    table = json.loads(Path(tracking.download_artifacts(run_id, "evaluation/core17_per_query.json", str(tmp_path))).read_text())
    rows = {row[0]: dict(zip(table["columns"], row)) for row in table["data"]}
    assert rows["q1"]["p-MRR"] == pytest.approx(100 * 2 / 3) and rows["q2"]["p-MRR"] == pytest.approx(-50.0)


def test_evaluation_logs_by_id_into_a_run_opened_in_another_thread(tracking):
    """Prefect may run a stage in any thread: the run is found by its id, not by thread-local state."""
    import threading

    import mlflow

    from tasks.evaluation.runner import log_evaluation
    from tasks.tracking.mlflow_access import close_run, experiment_id, open_run

    uri = tracking.tracking_uri
    experiment = experiment_id(uri, "eval-logging-threads")
    run_id = open_run(uri, experiment, "evaluate")
    from dualview_core.evaluation.suites import plan, suite_report

    cfg = EvaluationConfig(bootstrap_resamples=50)
    report = suite_report(plan("followir"), {"core17": evaluate_runs(eval_set("core17"), {"og": RUN_OG, "changed": RUN_CHANGED}, cfg)}, cfg)
    worker = threading.Thread(target=log_evaluation, args=(uri, run_id, report))
    worker.start()
    worker.join()
    close_run(uri, run_id)
    assert mlflow.active_run() is None
    (run,) = tracking.search_runs([experiment])
    assert run.info.run_id == run_id and "followir/core17/p-MRR" in run.data.metrics and run.info.status == "FINISHED"

def test_cli_evaluate_logs_what_it_prints(tracking, capsys):
    from dualview_core.sample import followir_path
    from flows.cli import main

    code = main(["evaluate", "--model", "minilm", "--eval-set", followir_path(), "--max-length", "256",
                 "--resamples", "100", "--mlflow-experiment", "cli-evaluate"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    experiment = tracking.get_experiment_by_name("cli-evaluate")
    (run,) = tracking.search_runs([experiment.experiment_id])
    assert printed["metrics"] and all(k.startswith("sample/") for k in printed["metrics"])
    for metric, values in printed["metrics"].items():
        assert run.data.metrics[metric] == pytest.approx(values["value"])
        assert run.data.metrics[f"{metric}_ci_high"] == pytest.approx(values["ci_high"])
    assert run.inputs.dataset_inputs[0].dataset.digest == printed["tasks"]["sample"]["digest"]
