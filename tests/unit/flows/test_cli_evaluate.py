"""`dualview score`, `compare` and `evaluate`: JSON out, exit 2 with one line naming file and line."""

from __future__ import annotations

import json

import pytest
import pytrec_eval

from dualview_core.data.evalsets import load_eval_set
from dualview_core.sample import followir_path
from dualview_core.data.trec import write_qrels, write_run
from flows.cli import main

QRELS_OG = {"a": {"0": 1, "1": 1, "2": 0, "3": 0}, "b": {"0": 0, "1": 1}}
QRELS_CHANGED = {"a": {"0": 0, "1": 1, "2": 0, "3": 0}, "b": {"0": 0, "1": 1}}  # a/0 changed; b none
RUN_OG = {"a": {"0": 1.0, "1": 2.0, "2": 3.0, "3": 4.0}, "b": {"0": 0.2, "1": 0.1}}
RUN_CHANGED = {"a": {"0": 4.0, "1": 1.0, "2": 2.0, "3": 3.0}, "b": {"0": 0.2, "1": 0.1}}


def cli(capsys, *argv) -> tuple[int, dict | None, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    paths = {name: str(tmp_path / f"{name}.txt") for name in ("qrels_og", "qrels_changed", "run_og", "run_changed")}
    write_qrels(paths["qrels_og"], QRELS_OG)
    write_qrels(paths["qrels_changed"], QRELS_CHANGED)
    write_run(paths["run_og"], RUN_OG)
    write_run(paths["run_changed"], RUN_CHANGED)
    return paths


def score_args(files: dict[str, str]) -> list[str]:
    return ["score", "--qrels-og", files["qrels_og"], "--qrels-changed", files["qrels_changed"],
            "--run-og", files["run_og"], "--run-changed", files["run_changed"]]


def test_score_reproduces_mteb_and_pytrec_eval(capsys, files):
    code, out, err = cli(capsys, *score_args(files), "--measures", "map_cut_1000", "ndcg_cut_5")
    assert code == 0 and err == ""
    # mteb's case: changed doc "0" goes from rank 4 to rank 1 -> -0.75; b has no changed doc
    assert out["p-MRR"]["value"] == -75.0 and out["p-MRR"]["queries"] == 1 and out["changed_documents"] == 1
    direct = pytrec_eval.RelevanceEvaluator(QRELS_OG, {"map_cut.1000", "ndcg_cut.5"}).evaluate(RUN_OG)
    for key in ("map_cut_1000", "ndcg_cut_5"):
        expected = 100 * sum(direct[q][key] for q in direct) / len(direct)
        assert out["og_run"][key]["value"] == pytest.approx(expected, abs=1e-12)
        assert out["og_run"][key]["ci_low"] <= expected <= out["og_run"][key]["ci_high"]
    # a: relevant under og at ranks 3 and 4 -> AP (1/3 + 2/4) / 2; b: rank 2 -> 1/2
    assert out["og_run"]["map_cut_1000"]["value"] == pytest.approx(100 * ((1 / 3 + 2 / 4) / 2 + 1 / 2) / 2)
    assert out["og_run_vs_qrels_changed"]["map_cut_1000"]["value"] == pytest.approx(100 * (1 / 3 + 1 / 2) / 2)


def test_score_swapped_runs_give_plus_75(capsys, files):
    args = score_args(files)
    args[6], args[8] = files["run_changed"], files["run_og"]
    _, out, _ = cli(capsys, *args)
    assert out["p-MRR"]["value"] == 75.0


@pytest.mark.parametrize(
    "which, text, where",
    [
        ("run_og", "a Q0 0 1 0.5 run\na Q0 1 2 0.4\n", ":2: expected 6 columns"),
        ("run_changed", "a Q0 0 1 zero run\n", ":1: score 'zero' is not a number"),
        ("run_og", "a Q0 0 1 0.5 run\nzz Q0 1 1 0.5 run\n", ":2: unknown query id 'zz'"),
        ("qrels_og", "a 0 0 1\na 0 1 maybe\n", ":2: relevance 'maybe' is not a number"),
    ],
)
def test_score_malformed_files_exit_2_with_file_and_line(capsys, files, which, text, where):
    with open(files[which], "w") as f:
        f.write(text)
    code, out, err = cli(capsys, *score_args(files))
    assert code == 2 and out is None
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"dualview: error: {files[which]}{where}")


def test_score_unknown_measure_exits_2(capsys, files):
    code, _, err = cli(capsys, *score_args(files), "--measures", "map@1000")
    assert code == 2 and "unknown measure 'map@1000'" in err


def test_compare_trec_runs_exact_p_value(capsys, tmp_path):
    qrels = {q: {"good": 1, "bad": 0} for q in "wxyz"}
    write_qrels(str(tmp_path / "q.txt"), qrels)
    write_run(str(tmp_path / "a.trec"), {q: {"good": 0.9, "bad": 0.1} for q in "wxyz"})  # RR 1
    write_run(str(tmp_path / "b.trec"), {q: {"good": 0.1, "bad": 0.9} for q in "wxyz"})  # RR 1/2
    code, out, _ = cli(capsys, "compare", tmp_path / "a.trec", tmp_path / "b.trec", "--qrels", tmp_path / "q.txt",
                       "--measure", "recip_rank")
    result = out["comparisons"]["recip_rank"]
    assert code == 0 and result["n"] == 4 and result["difference"]["value"] == 50.0
    assert result["p_value"] == 2 / 16  # every query better by the same amount: 2 of 16 sign patterns
    code, _, err = cli(capsys, "compare", tmp_path / "a.trec", tmp_path / "b.trec")
    assert code == 2 and "needs --qrels" in err


@pytest.mark.slow
def test_evaluate_on_the_sample_prints_intervals_and_score_reproduces_it(capsys, tmp_path):
    sample = followir_path()
    code, out, _ = cli(capsys, "evaluate", "--model", "minilm", "--eval-set", sample, "--out", tmp_path / "ev",
                         "--max-length", "256", "--resamples", "200")
    assert code == 0
    assert out["suite"] == "sample"  # the sample's _manifest.json names its catalog task
    assert list(out["metrics"]) == ["sample/p-MRR", "sample/score", "sample/score_mteb1"]
    for metric in out["metrics"].values():
        assert metric["ci_low"] <= metric["value"] <= metric["ci_high"] and metric["queries"] == 23
    task = out["tasks"]["sample"]["details"]
    assert task["score_measure"] == "map_cut_1000" and task["quarantined"] == 0
    assert task["query_template"] == "{query} {instruction}" and "mteb 2.x" in out["details"]["score_convention"]
    assert -100 <= out["metrics"]["sample/p-MRR"]["value"] <= 100 and 0 <= out["metrics"]["sample/score"]["value"] <= 100

    # the written runs, scored by `dualview score` as anyone's runs would be, give the same numbers
    es = load_eval_set(sample).eval_set
    write_qrels(str(tmp_path / "og.txt"), es.qrels_for("og"))
    write_qrels(str(tmp_path / "changed.txt"), es.qrels_for("changed"))
    code, scored, _ = cli(capsys, "score", "--qrels-og", tmp_path / "og.txt", "--qrels-changed", tmp_path / "changed.txt",
                          "--run-og", tmp_path / "ev" / "run_og.trec", "--run-changed", tmp_path / "ev" / "run_changed.trec",
                          "--measures", "map_cut_1000", "--resamples", "200")
    assert scored["p-MRR"] == out["metrics"]["sample/p-MRR"]
    assert scored["og_run"]["map_cut_1000"] == out["metrics"]["sample/score"]
    assert scored["og_run_vs_qrels_changed"]["map_cut_1000"] == out["metrics"]["sample/score_mteb1"]

    # comparing the evaluation with itself: no difference, p = 1
    code, compared, _ = cli(capsys, "compare", tmp_path / "ev", tmp_path / "ev" / "report.json")
    assert compared["comparisons"]["sample/p-MRR"]["p_value"] == 1.0 and compared["comparisons"]["sample/p-MRR"]["n"] == 23


def test_evaluate_missing_model_exits_2(capsys, tmp_path):
    code, _, err = cli(capsys, "evaluate", "--model", tmp_path / "nope", "--eval-set", followir_path())
    assert code == 2 and "no such model folder" in err


def test_an_mlflow_server_that_cannot_be_reached_is_one_line_before_the_evaluation(capsys, monkeypatch):
    from dualview_core import sample
    from flows.cli import main

    # where `--mlflow-experiment` logs (the environment's URI, or one an earlier caller in this process set)
    monkeypatch.setattr("mlflow.get_tracking_uri", lambda: "http://127.0.0.1:1")
    code = main(["evaluate", "--model", "minilm", "--eval-set", sample.followir_path(), "--mlflow-experiment", "x"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("dualview: error: cannot reach MLflow at http://127.0.0.1:1: ")


def test_evaluate_refuses_a_registry_uri_it_cannot_resolve_in_one_line(capsys):
    code, out, err = cli(capsys, "evaluate", "--model", "models:/dualview-all-dv-minilm", "--eval-set", followir_path())
    assert code == 2 and out is None
    assert err == ("dualview: error: models:/dualview-all-dv-minilm: not a registered model URI "
                   "(models:/NAME/VERSION or models:/NAME@ALIAS)\n")
