"""The benchmark registry and the report: each benchmark's numbers from hand-made eval sets and runs."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest

from dualview_core.config import EvaluationConfig
from dualview_core.contracts import EVAL_CORPUS, EVAL_QRELS, EVAL_QUERIES, EvalSet
from dualview_core.evaluation.benchmarks import BASELINE, BENCHMARKS, detect_benchmark
from dualview_core.evaluation.scoring import eval_set_digest, evaluate_runs
from dualview_core.data.evalsets import load_eval_set
from dualview_core.method.metrics import NDCG_10, P_MRR, ROBUSTNESS_10, SCORE
from dualview_core.sample import followir_path

CFG = EvaluationConfig(bootstrap_resamples=100)


def make(name: str, queries: list[tuple], qrels: list[tuple], docs=("d1", "d2", "d3"), meta=None) -> EvalSet:
    """queries: (query_id, group_id, view, instruction); qrels: (query_id, view, doc_id, relevance)."""
    return EvalSet(
        name,
        pa.Table.from_pylist([{"doc_id": d, "title": "", "text": d} for d in docs], schema=EVAL_CORPUS),
        pa.Table.from_pylist([dict(zip(("query_id", "group_id", "view", "instruction"), q)) | {"query": "q"} for q in queries],
                             schema=EVAL_QUERIES),
        pa.Table.from_pylist([dict(zip(("query_id", "view", "doc_id", "relevance"), r)) for r in qrels], schema=EVAL_QRELS),
        meta=meta or {},
    )


def test_detects_the_benchmark_from_layout_and_views():
    assert detect_benchmark(load_eval_set(followir_path()).eval_set) == "followir"
    assert detect_benchmark(make("m", [("a", "a", "og", "")], [], meta={"layout": "mair"})) == "mair"
    assert detect_benchmark(make("i", [("a", "a", v, v) for v in ("og", "changed", "reversed")], [])) == "infosearch"
    assert detect_benchmark(make("r", [("a1", "a", "og", "x"), ("a2", "a", "og", "y")], [])) == "instructir"


def test_infosearch_p_mrr_compares_the_original_instruction_with_the_changed_one():
    es = make("audience", [("a", "a", v, v) for v in ("og", "changed", "reversed")],
              [("a", "og", "d1", 1), ("a", "og", "d2", 1), ("a", "changed", "d1", 0), ("a", "changed", "d2", 1)])
    runs = {"og": {"a": {"d1": 0.9, "d2": 0.5, "d3": 0.1}},  # d1 first under the original instruction
            "changed": {"a": {"d1": 0.1, "d2": 0.9, "d3": 0.5}}}  # ... and last under the changed one: 1 -> 3
    report = evaluate_runs(es, runs, CFG)
    assert report.benchmark == "infosearch"
    assert report.per_query[P_MRR] == {"a": pytest.approx(100 * (1 - 1 / 3))}
    assert report.per_query[NDCG_10] == {"a": pytest.approx(100.0)}  # d2, the one relevant doc, first


def test_infosearch_ranks_its_baseline_under_the_original_instruction():
    """As its authors' evaluator does (its "ori" run uses instruction_og), not under an empty one."""
    es = make("audience", [("a", "a", v, f"{v} instruction") for v in ("og", "changed", "reversed")], [])
    views = BENCHMARKS["infosearch"].views(es)
    assert set(views) == {"og", "changed"}
    assert views["og"] == {"a": ("q", "og instruction")}
    es.meta[BASELINE] = "none"  # a catalog task may ask for the bare query instead
    assert BENCHMARKS["infosearch"].views(es)["og"] == {"a": ("q", "")}


def test_instructir_robustness_is_the_worst_variant():
    es = make("instructir", [("a1", "a", "og", "x"), ("a2", "a", "og", "y"), ("b1", "b", "og", "z")],
              [(q, "og", "d1", 1) for q in ("a1", "a2", "b1")])
    runs = {"og": {"a1": {"d1": 0.9, "d2": 0.1}, "a2": {"d1": 0.1, "d2": 0.9}, "b1": {"d1": 0.9}}}
    report = evaluate_runs(es, runs, CFG)
    ndcg_rank2 = 100 / math.log2(3)  # the relevant doc at rank 2
    assert report.per_query[ROBUSTNESS_10] == pytest.approx({"a": ndcg_rank2, "b": 100.0})
    assert report.summary[ROBUSTNESS_10].mean == pytest.approx((ndcg_rank2 + 100) / 2)


def test_report_json_has_null_for_undefined_means():
    es = make("core17", [("a", "a", v, v) for v in ("og", "changed")], [("a", v, "d1", 1) for v in ("og", "changed")])
    report = evaluate_runs(es, {"og": {"a": {"d1": 1.0}}, "changed": {"a": {"d1": 1.0}}}, CFG)
    out = json.loads(json.dumps(report.as_dict()))  # strict JSON round trip
    assert out["metrics"][P_MRR] == {"value": None, "ci_low": None, "ci_high": None, "queries": 0}
    assert out["metrics"][SCORE]["value"] == 100.0


def test_digest_ignores_row_order_and_sees_content():
    es = load_eval_set(followir_path()).eval_set
    shuffled = EvalSet(es.name, es.corpus.take(list(reversed(range(es.corpus.num_rows)))), es.queries, es.qrels, es.top_ranked)
    assert eval_set_digest(shuffled) == eval_set_digest(es)
    changed = es.corpus.set_column(2, "text", pa.array(["x"] + es.corpus.column("text").to_pylist()[1:]))
    assert eval_set_digest(EvalSet(es.name, changed, es.queries, es.qrels, es.top_ranked)) != eval_set_digest(es)
