"""The benchmarks we report, as a registry: adding a benchmark is adding one `Benchmark` entry.

Each entry says which runs an eval set needs (views: which instruction each query is asked under)
and how per-query values of its measures come out of those runs and the eval set's qrels. Values
are ×100, as the benchmarks publish them. It knows nothing about encoders, intervals, files or
services; the measures themselves live in `metrics`.

- FollowIR: og and changed runs; p-MRR on the documents whose label changed; Score = the og run's
  MAP@1000 (Robust04, Core17) or nDCG@5 (News21) against qrels_og, as mteb 2.x scores it, and
  Score (mteb 1.x) = the same run against qrels_changed, as mteb 1.x scored it (its loader swapped the
  two qrels).
- InfoSearch: a run under the original instruction and one under the changed instruction, as its
  authors' evaluator ranks them; p-MRR on documents relevant under qrels_og and not under
  qrels_changed; nDCG@10 of the changed run against qrels_changed.
- MAIR: nDCG@10 of the og run (reported as `ndcg@10`); a task's splits are pooled by query.
- InstructIR: nDCG@10 per instruction variant and robustness@10, the worst variant per query group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dualview_core.config import EvaluationConfig
from dualview_core.contracts import EvalSet, Qrels, Run, View
from dualview_core.method.metrics import (
    NDCG_10,
    NDCG_AT_10,
    P_MRR,
    ROBUSTNESS_10,
    SCALE,
    SCORE,
    SCORE_MTEB1,
    followir_changed,
    infosearch_changed,
    p_mrr_per_query,
    per_query_measures,
    pytrec_measure,
    robustness_at_10,
    unscored_queries,
)

ViewQueries = dict[str, tuple[str, str]]
PerQuery = dict[str, dict[str, float]]  # metric -> query_id -> value (×100)
SCORE_MEASURE = "score_measure"  # EvalSet.meta key: the task's Score measure (from the catalog)
BASELINE = "baseline"  # EvalSet.meta key: the instruction the baseline run is asked under, og or none


def scaled(values: Mapping[str, float]) -> dict[str, float]:
    return {q: v * SCALE for q, v in values.items()}


def followir_values(qrels_og: Qrels, qrels_changed: Qrels, run_og: Run, run_changed: Run, measure: str) -> PerQuery:
    """FollowIR per query: p-MRR, Score (og run vs qrels_og) and Score as mteb 1.x had it (og run vs qrels_changed)."""
    key = pytrec_measure(measure)[1]
    return {
        P_MRR: scaled(p_mrr_per_query(run_og, run_changed, followir_changed(qrels_og, qrels_changed))),
        SCORE: scaled(per_query_measures(qrels_og, run_og, [measure])[key]),
        SCORE_MTEB1: scaled(per_query_measures(qrels_changed, run_og, [measure])[key]),
    }


@dataclass(frozen=True)
class Benchmark:
    name: str
    views: Callable[[EvalSet], dict[str, ViewQueries]]  # run name -> the queries asked
    values: Callable[[EvalSet, dict[str, Run], EvaluationConfig], PerQuery]
    headline: tuple[str, ...]  # what the CLI prints and the figure shows, in order
    details: Callable[[EvalSet, dict[str, Run], EvaluationConfig], dict] = lambda es, runs, cfg: {}


def _score_measure(es: EvalSet, cfg: EvaluationConfig) -> str:
    """The task's Score measure, as the catalog names it (`score_measure` in the eval set's meta)."""
    return es.meta.get(SCORE_MEASURE) or cfg.default_score_measure


def _followir(es: EvalSet, runs: dict[str, Run], cfg: EvaluationConfig) -> PerQuery:
    og, changed = View.OG.value, View.CHANGED.value
    return followir_values(es.qrels_for(og), es.qrels_for(changed), runs[og], runs[changed], _score_measure(es, cfg))


def _followir_details(es: EvalSet, runs: dict[str, Run], cfg: EvaluationConfig) -> dict:
    og, changed = View.OG.value, View.CHANGED.value
    docs = followir_changed(es.qrels_for(og), es.qrels_for(changed))
    return {"score_measure": _score_measure(es, cfg), "unscored_queries": unscored_queries(runs[og], runs[changed], docs)}


def _og_and_changed(es: EvalSet) -> dict[str, ViewQueries]:
    """The baseline run (`og`) and the changed one. The baseline is asked under the original
    instruction unless the catalog says `baseline: none` (`BASELINE` in the eval set's meta)."""
    views = {v: es.queries_for(v) for v in (View.OG.value, View.CHANGED.value)}
    if es.meta.get(BASELINE) == "none":
        views[View.OG.value] = {q: (query, "") for q, (query, _) in views[View.OG.value].items()}
    return views


def _infosearch(es: EvalSet, runs: dict[str, Run], cfg: EvaluationConfig) -> PerQuery:
    # the baseline run is the one under instruction_og: InfoSearch's evaluator (EIT-NLP/InfoSearch,
    # AbsTaskInstructionRetrieval.evaluate) ranks its "ori" run with the og instructions
    og, changed = es.qrels_for(View.OG.value), es.qrels_for(View.CHANGED.value)
    pmrr = p_mrr_per_query(runs[View.OG.value], runs[View.CHANGED.value], infosearch_changed(og, changed))
    ndcg = per_query_measures(changed, runs[View.CHANGED.value], [NDCG_10])[NDCG_10]
    return {P_MRR: scaled(pmrr), NDCG_10: scaled(ndcg)}


def _og_only(es: EvalSet) -> dict[str, ViewQueries]:
    return {View.OG.value: es.queries_for(View.OG.value)}


def _mair(es: EvalSet, runs: dict[str, Run], cfg: EvaluationConfig) -> PerQuery:
    ndcg = per_query_measures(es.qrels_for(View.OG.value), runs[View.OG.value], [NDCG_10])[NDCG_10]
    return {NDCG_AT_10: scaled(ndcg)}


def _instructir(es: EvalSet, runs: dict[str, Run], cfg: EvaluationConfig) -> PerQuery:
    ndcg = per_query_measures(es.qrels_for(View.OG.value), runs[View.OG.value], [NDCG_10])[NDCG_10]
    groups = {r["query_id"]: r["group_id"] for r in es.queries.to_pylist() if r["view"] == View.OG.value}
    return {ROBUSTNESS_10: scaled(robustness_at_10(ndcg, groups)), NDCG_10: scaled(ndcg)}


BENCHMARKS: dict[str, Benchmark] = {
    "followir": Benchmark("followir", _og_and_changed, _followir, (P_MRR, SCORE, SCORE_MTEB1), details=_followir_details),
    "infosearch": Benchmark("infosearch", _og_and_changed, _infosearch, (P_MRR, NDCG_10)),
    "mair": Benchmark("mair", _og_only, _mair, (NDCG_AT_10,)),
    "instructir": Benchmark("instructir", _og_only, _instructir, (ROBUSTNESS_10, NDCG_10)),
}


def benchmark_named(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}")
    return BENCHMARKS[name]


def detect_benchmark(es: EvalSet) -> str:
    """Which benchmark an eval set belongs to, from its layout and views."""
    views = set(es.views())
    if es.meta.get("layout") == "mair":
        return "mair"
    if View.REVERSED.value in views:
        return "infosearch"
    if View.CHANGED.value in views:
        return "followir"
    groups = es.queries.column("group_id").to_pylist()
    return "instructir" if len(set(groups)) < len(groups) else "mair"
