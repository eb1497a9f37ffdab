"""Measures on hand-made runs: p-MRR (mteb's published cases and hand-computed ones), the changed-
document rules, pytrec_eval measures against pytrec_eval itself, robustness@10, MAIR's weighting."""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval

from dualview_core.evaluation.benchmarks import followir_values
from dualview_core.method.metrics import (
    MAP_1000,
    NDCG_5,
    NDCG_10,
    P_MRR,
    SCORE,
    SCORE_MTEB1,
    followir_changed,
    infosearch_changed,
    metric_key,
    p_mrr,
    p_mrr_per_query,
    per_query_measures,
    pytrec_measure,
    rank_change_score,
    rank_reference,
    ranks,
    robustness_at_10,
    unscored_queries,
)

# --- mteb's published unit cases (tests of calculate_pmrr) --------------------------------------

OG = {"a": {"0": 1, "1": 2, "2": 3, "3": 4}}
CHANGED_DOCS = {"a": ["0"]}


def test_mteb_case_identical_runs_score_zero():
    assert p_mrr(OG, {"a": {"0": 1, "1": 2, "2": 3, "3": 4}}, CHANGED_DOCS) == 0.0


def test_mteb_case_changed_doc_rises_scores_minus_075():
    # "0" is last (rank 4) in the og run and first in the changed run: the wrong way round.
    assert p_mrr(OG, {"a": {"0": 4, "1": 1, "2": 2, "3": 3}}, CHANGED_DOCS) == -0.75


def test_mteb_case_runs_swapped_scores_plus_075():
    assert p_mrr({"a": {"0": 4, "1": 1, "2": 2, "3": 3}}, OG, CHANGED_DOCS) == 0.75


def test_all_scores_tied_scores_zero_whatever_the_insertion_order():
    # mteb #5092: a score-only stable sort ranked tied docs by dict order; (score, doc_id) does not.
    tied = {"0": 0.5, "1": 0.5, "2": 0.5}
    assert p_mrr({"a": tied}, {"a": dict(reversed(tied.items()))}, {"a": ["0"]}) == 0.0


# --- hand-computed cases ------------------------------------------------------------------------


def test_rank_change_score_closed_forms():
    assert rank_change_score(1, 4) == 0.75  # fell from 1 to 4: 1 - (1/4)/(1/1)
    assert rank_change_score(4, 1) == -0.75  # rose from 4 to 1: (1/4)/(1/1) - 1
    assert rank_change_score(2, 3) == pytest.approx(1 - 2 / 3)
    assert rank_change_score(3, 3) == 0.0


def test_improved_worsened_unchanged_average_per_query_then_over_queries():
    og = {"q1": {"x": 0.9, "y": 0.8, "z": 0.1}, "q2": {"x": 0.9, "y": 0.8}}
    new = {"q1": {"x": 0.1, "y": 0.8, "z": 0.9}, "q2": {"x": 0.9, "y": 0.8}}
    changed = {"q1": ["x", "z"], "q2": ["x"]}
    # q1: x falls 1 -> 3 (+2/3), z rises 3 -> 1 (-2/3): mean 0; q2: unchanged, 0.
    assert p_mrr_per_query(og, new, changed) == pytest.approx({"q1": 0.0, "q2": 0.0})
    changed = {"q1": ["x"], "q2": ["x"]}
    # q1: 1 - (1/3)/(1/1) = 2/3; q2: 0 -> mean over queries 1/3
    assert p_mrr(og, new, changed) == pytest.approx(1 / 3)


def test_missing_document_ranks_after_the_whole_run():
    og = {"q": {"a": 0.9, "b": 0.8, "c": 0.1}}  # b at rank 2
    new = {"q": {"a": 0.9, "c": 0.8, "d": 0.1}}  # b absent: rank len(run) + 1 = 4
    assert ranks(new["q"], ["b"]) == {"b": 4}
    assert p_mrr(og, new, {"q": ["b"]}) == pytest.approx(1 - (1 / 4) / (1 / 2))  # 0.5
    # absent from both runs of equal length: 4 -> 4, no change
    assert p_mrr(og, new, {"q": ["zzz"]}) == 0.0


def test_ties_break_by_doc_id_descending():
    docs = {"a": 0.5, "b": 0.5, "c": 0.9, "d": 0.2}
    assert ranks(docs, ["c", "b", "a", "d"]) == {"c": 1, "b": 2, "a": 3, "d": 4}
    # pytrec_eval agrees: with b the only relevant document, reciprocal rank is 1/2
    rr = pytrec_eval.RelevanceEvaluator({"q": {"b": 1}}, {"recip_rank"}).evaluate({"q": docs})["q"]["recip_rank"]
    assert rr == 0.5


def test_queries_without_changed_docs_or_missing_from_a_run_drop_out():
    og = {"q1": {"x": 1.0, "y": 0.5}, "q2": {"x": 1.0}}
    new = {"q1": {"x": 0.5, "y": 1.0}}
    changed = {"q1": ["x"], "q2": ["x"], "q3": []}
    assert p_mrr_per_query(og, new, changed) == {"q1": 0.5}
    assert unscored_queries(og, new, changed) == ["q2"]
    assert math.isnan(p_mrr(og, new, {"q1": []}))


def test_fast_ranks_match_the_sorting_reference_on_random_runs_with_ties():
    rng = random.Random(7)
    for _ in range(300):
        docs = {f"d{rng.randint(0, 60)}": rng.choice([0.1, 0.2, 0.3, rng.random()]) for _ in range(rng.randint(1, 40))}
        targets = [f"d{rng.randint(0, 70)}" for _ in range(5)]
        assert ranks(docs, targets) == {t: rank_reference(docs, t) for t in targets}


# --- which documents changed --------------------------------------------------------------------


def test_followir_changed_is_any_label_difference_over_og_judgements():
    og = {"q": {"a": 1, "b": 0, "c": 2, "d": 1}}
    new = {"q": {"a": 0, "b": 0, "c": 1}}  # d unjudged under changed: label 0
    assert followir_changed(og, new) == {"q": ["a", "c", "d"]}


def test_infosearch_changed_is_relevant_first_and_not_second():
    first = {"q": {"a": 1, "b": 0, "c": 2, "d": 1}}
    second = {"q": {"a": 0, "b": 1, "c": 1, "d": 1}}
    assert infosearch_changed(first, second) == {"q": ["a"]}


# --- pytrec_eval measures -----------------------------------------------------------------------

QRELS = {"q1": {"d1": 1, "d2": 0, "d3": 1}, "q2": {"d1": 0, "d4": 2}}
RUN = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d9": 0.1}, "q2": {"d1": 0.9, "d4": 0.2}, "q3": {"d1": 1.0}}


def test_measure_names_map_to_pytrec_eval():
    assert pytrec_measure("map_cut_1000") == ("map_cut.1000", "map_cut_1000")
    assert pytrec_measure("ndcg_cut.5") == ("ndcg_cut.5", "ndcg_cut_5")
    assert pytrec_measure("P_10") == ("P.10", "P_10")
    assert pytrec_measure("recip_rank") == ("recip_rank", "recip_rank")
    with pytest.raises(ValueError, match="unknown measure"):
        pytrec_measure("map@1000")


def test_measures_equal_pytrec_eval_called_directly():
    ours = per_query_measures(QRELS, RUN, [MAP_1000, NDCG_5, NDCG_10, "recip_rank"])
    direct = pytrec_eval.RelevanceEvaluator(QRELS, {"map_cut.1000", "ndcg_cut.5", "ndcg_cut.10", "recip_rank"}).evaluate(RUN)
    for key in (MAP_1000, NDCG_5, NDCG_10, "recip_rank"):
        assert ours[key] == {q: direct[q][key] for q in direct}
    assert set(ours[MAP_1000]) == {"q1", "q2"}  # q3 has no judgements: not scored


def test_measures_closed_form():
    values = per_query_measures(QRELS, RUN, [MAP_1000, NDCG_5])
    assert values[MAP_1000]["q1"] == pytest.approx((1 / 1 + 2 / 3) / 2)  # relevant at ranks 1 and 3
    assert values[MAP_1000]["q2"] == pytest.approx(1 / 2)  # the one relevant doc at rank 2
    dcg, ideal = 1 + 1 / math.log2(4), 1 + 1 / math.log2(3)
    assert values[NDCG_5]["q1"] == pytest.approx(dcg / ideal)


def test_followir_values_score_against_og_and_against_changed_qrels():
    run_og = {"q": {"a": 0.9, "b": 0.5, "c": 0.1}}
    run_new = {"q": {"a": 0.1, "b": 0.5, "c": 0.9}}
    og, changed = {"q": {"a": 1, "b": 1, "c": 0}}, {"q": {"a": 0, "b": 1, "c": 0}}
    values = followir_values(og, changed, run_og, run_new, MAP_1000)
    assert values[P_MRR] == {"q": pytest.approx(100 * (1 - 1 / 3))}  # a falls 1 -> 3
    assert values[SCORE] == {"q": pytest.approx(100.0)}  # a, b at ranks 1, 2
    assert values[SCORE_MTEB1] == {"q": pytest.approx(50.0)}  # b alone, at rank 2


# --- other benchmarks ---------------------------------------------------------------------------


def test_robustness_at_10_is_the_worst_variant_per_group():
    ndcg = {"q1-a": 0.8, "q1-b": 0.5, "q2-a": 0.9}
    groups = {"q1-a": "q1", "q1-b": "q1", "q2-a": "q2"}
    assert robustness_at_10(ndcg, groups) == {"q1": 0.5, "q2": 0.9}


def test_metric_keys():
    assert metric_key("followir", "core17", P_MRR) == "followir/core17/p-MRR"
    assert metric_key("followir", None, SCORE, "_ci_low") == "followir/score_ci_low"
