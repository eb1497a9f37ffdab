"""Our numbers equal each benchmark's reference implementation, to 1e-6 on our ×100 scale.

Seeded eval sets (tests/helpers/reference_fixtures.py: ties, documents missing from runs, a query
whose labels do not change) are written to folders, loaded by `load_eval_set`, scored by
`evaluate_runs`, and scored again by the references:

- FollowIR, mteb 2.x (`mteb._evaluators.retrieval_metrics`, the code its InstructionReranking tasks
  call): `evaluate_p_mrr_change` for p-MRR and the og run against qrels_og (our `score`), and
  `calculate_retrieval_scores` for the unrounded per-query values. mteb rounds means to 5 decimals;
  ours are not rounded, so means are compared after rounding ours the same way.
- FollowIR, mteb 1.x (1.12.0 to 1.39.0, `AbsTaskInstructionRetrieval.py`,
  `HFDataLoaderInstructions.load`): the loader maps the *changed* qrels into the dict it then calls
  og (`self.changed_qrels.map(qrels_dict_init)`), so the og run was scored against qrels_changed:
  our `score_mteb1`. Its scoring is the same pytrec_eval call as 2.x's `calculate_retrieval_scores`.
- InfoSearch: golden numbers from its authors' evaluator (benchmarks/reference/infosearch_golden.py,
  tests/fixtures/reference/infosearch_golden.json).
- MAIR: pytrec_eval's ndcg_cut_10 directly, as sunnweiwei/MAIR's `trec_eval` does (no label
  threshold, no self-exclusion; mean over the scored queries rounded to 5 decimals; splits weighted
  by their number of queries).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dualview_core.config import EvaluationConfig
from dualview_core.data.evalsets import load_eval_set
from dualview_core.data.catalog import task_named
from dualview_core.evaluation.benchmarks import SCORE_MEASURE
from dualview_core.evaluation.scoring import evaluate_runs
from dualview_core.method.metrics import NDCG_10, NDCG_AT_10, P_MRR, SCALE, SCORE, SCORE_MTEB1, followir_changed
from tests.helpers.reference_fixtures import instruction_sets, mair_split, write_mair_layout, write_original_layout

pytestmark = pytest.mark.slow  # importing mteb takes a few seconds

CFG = EvaluationConfig(bootstrap_resamples=10)
TOL = 1e-6  # on the ×100 scale
GOLDEN = Path(__file__).parents[2] / "fixtures" / "reference" / "infosearch_golden.json"
SUBSETS = {"robust04": ("map_cut_1000", "map_at_1000"), "news21": ("ndcg_cut_5", "ndcg_at_5"),
           "core17": ("map_cut_1000", "map_at_1000")}


@pytest.fixture(scope="module")
def mteb_metrics():
    from mteb._evaluators import retrieval_metrics

    return retrieval_metrics


def suffixed(by_query: dict, suffix: str) -> dict:
    return {f"{q}{suffix}": v for q, v in by_query.items()}


def max_diff(ours: dict[str, float], reference: dict[str, float]) -> float:
    assert set(ours) == set(reference)
    return max(abs(ours[q] - SCALE * reference[q]) for q in ours)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_followir_equals_mteb(tmp_path, mteb_metrics, subset, seed):
    data = instruction_sets(seed)
    es = load_eval_set(str(write_original_layout(tmp_path / subset, data))).eval_set
    es.meta[SCORE_MEASURE] = task_named(subset).score  # as the suite runner sets it from the catalog
    runs = {"og": data["runs"]["og"], "changed": data["runs"]["changed"]}
    report = evaluate_runs(es, runs, CFG, "followir")
    qrels_og, qrels_changed = data["qrels"]["og"], data["qrels"]["changed"]
    pytrec_key, mteb_key = SUBSETS[subset]

    # mteb 2.x: one qrels and one results dict over "<id>-og" / "<id>-changed", and the qrel diff
    qrels = suffixed(qrels_og, "-og") | suffixed(qrels_changed, "-changed")
    results = suffixed(runs["og"], "-og") | suffixed(runs["changed"], "-changed")
    reference = mteb_metrics.evaluate_p_mrr_change(qrels, results, followir_changed(qrels_og, qrels_changed),
                                                    [1, 5, 10, 1000])
    assert abs(report.summary[P_MRR].mean - SCALE * reference["p-MRR"]) < TOL
    assert round(report.summary[SCORE].mean / SCALE, 5) == reference["og"][mteb_key]

    per_query = mteb_metrics.calculate_retrieval_scores(suffixed(runs["og"], "-og"), suffixed(qrels_og, "-og"), [5, 1000])
    unrounded = {q.removesuffix("-og"): s[pytrec_key] for q, s in per_query.all_scores.items()}
    assert max_diff(report.per_query[SCORE], unrounded) < TOL

    # mteb 1.x: the og run against qrels_changed (its loader's swap)
    per_query = mteb_metrics.calculate_retrieval_scores(runs["og"], qrels_changed, [5, 1000])
    assert max_diff(report.per_query[SCORE_MTEB1], {q: s[pytrec_key] for q, s in per_query.all_scores.items()}) < TOL
    rounded = per_query.map["MAP@1000"] if pytrec_key.startswith("map") else per_query.ndcg["NDCG@5"]
    assert round(report.summary[SCORE_MTEB1].mean / SCALE, 5) == rounded


def test_followir_p_mrr_per_query_equals_mteb(tmp_path, mteb_metrics):
    """Per query too, with the query whose labels do not change (q0) left out by both."""
    data = instruction_sets(seed=3)
    es = load_eval_set(str(write_original_layout(tmp_path / "core17", data))).eval_set
    report = evaluate_runs(es, {v: data["runs"][v] for v in ("og", "changed")}, CFG, "followir")
    changed = followir_changed(data["qrels"]["og"], data["qrels"]["changed"])
    assert changed["q0"] == [] and "q0" not in report.per_query[P_MRR]
    og, new = suffixed(data["runs"]["og"], "-og"), suffixed(data["runs"]["changed"], "-changed")
    reference = {q: mteb_metrics.calculate_pmrr(og, new, {q: docs}) for q, docs in changed.items() if docs}
    assert max_diff(report.per_query[P_MRR], reference) < TOL


def test_infosearch_equals_its_authors_evaluator(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    for case in golden["cases"]:
        data = instruction_sets(case["seed"], reversed_view=True)
        es = load_eval_set(str(write_original_layout(tmp_path / f"audience-{case['seed']}", data))).eval_set
        report = evaluate_runs(es, {v: data["runs"][v] for v in ("og", "changed")}, CFG, "infosearch")
        assert abs(report.summary[P_MRR].mean - SCALE * case["p-MRR"]) < TOL
        # its nDCG@10 is the changed run against qrels_changed, rounded to 5 decimals by its evaluator
        assert round(report.summary[NDCG_10].mean / SCALE, 5) == case["ndcg_at_10_changed"]


def test_mair_equals_pytrec_eval_and_its_split_weighting(tmp_path):
    import pytrec_eval

    reports, means, sizes = [], [], []
    for seed, n in ((0, 7), (1, 3)):
        queries, corpus, run = mair_split(seed, n)
        es = load_eval_set(str(write_mair_layout(tmp_path / f"split{seed}", queries, corpus))).eval_set
        reports.append(evaluate_runs(es, {"og": run}, CFG, "mair"))
        qrels = {q["qid"]: {str(x["id"]): int(x["score"]) for x in q["labels"]} for q in queries}
        scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        per_query = {q: s["ndcg_cut_10"] for q, s in scores.items()}
        assert max_diff(reports[-1].per_query[NDCG_AT_10], per_query) < TOL
        means.append(round(sum(per_query.values()) / len(scores), 5))
        assert round(reports[-1].summary[NDCG_AT_10].mean / SCALE, 5) == means[-1]
        sizes.append(len(queries))
    pooled = sum(m * s for m, s in zip(means, sizes)) / sum(sizes)  # MAIR's print_results
    # a MAIR task folder holds all its splits (`dualview data get`): its mean over queries is MAIR's weighted one
    every_query = [v for r in reports for v in r.per_query[NDCG_AT_10].values()]
    assert abs(sum(every_query) / len(every_query) - SCALE * pooled) < SCALE * 5e-6  # its means are rounded
