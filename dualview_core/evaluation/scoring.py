"""Evaluating a model on an eval set, end to end in memory: runs -> per-query values -> intervals.

Owns the `EvalReport` (per-query values of every measure, their means with bootstrap intervals,
the eval set's identity) and the functions the CLI and the orchestration flow call:
`evaluate_model` (encoder + eval set), `evaluate_runs` (runs someone already has) and
`eval_set_digest` (lineage); `suites` combines tasks into a suite's numbers.
It knows nothing about files, MLflow or Prefect: tasks and the CLI write and log what it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dualview_core.config import EvaluationConfig
from dualview_core.contracts import EvalSet, Qrels, Run
from dualview_core.evaluation.benchmarks import BENCHMARKS, PerQuery, benchmark_named, detect_benchmark, scaled
from dualview_core.keys import canonical_json, content_digest, digest
from dualview_core.method.metrics import (
    CHANGED_RUN,
    OG_RUN,
    OG_RUN_VS_QRELS_CHANGED,
    P_MRR,
    SCALE,
    followir_changed,
    infosearch_changed,
    p_mrr_per_query,
    per_query_measures,
    unscored_queries,
)
from dualview_core.evaluation.retrieval import retrieve
from dualview_core.model import TextEncoder
from dualview_core.evaluation.stats import Interval, bootstrap_ci

CHANGED_RULES = {"followir": followir_changed, "infosearch": infosearch_changed}


def eval_set_digest(eval_set: EvalSet) -> str:
    """An order-independent digest of an eval set's content (corpus, queries, qrels, candidates)."""
    parts = []
    for name in ("corpus", "queries", "qrels", "top_ranked"):
        table = getattr(eval_set, name)
        rows = [] if table is None else table.to_pylist()
        parts.append(f"{name}:{content_digest(digest(canonical_json(r)) for r in rows)}")
    return digest("\n".join(parts).encode())


@dataclass
class EvalReport:
    benchmark: str  # a BENCHMARKS key
    subset: str  # the eval set's name, e.g. core17
    digest: str
    per_query: PerQuery  # metric -> query_id -> value (×100)
    summary: dict[str, Interval]  # metric -> mean over queries with its bootstrap interval
    details: dict[str, object] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict, repr=False)  # view -> run; not serialised

    @property
    def headline(self) -> tuple[str, ...]:
        return BENCHMARKS[self.benchmark].headline

    def as_dict(self, with_per_query: bool = True) -> dict:
        out = {
            "benchmark": self.benchmark,
            "subset": self.subset,
            "digest": self.digest,
            "metrics": {m: as_json(i, len(self.per_query.get(m, {}))) for m, i in self.summary.items()},
            "details": self.details,
        }
        if with_per_query:
            out["per_query"] = self.per_query
        return out


def as_json(interval: Interval, queries: int) -> dict[str, float | int | None]:
    """{value, ci_low, ci_high, queries}; NaN is not JSON, so an undefined mean is written as null."""
    values = {k: None if math.isnan(v) else v for k, v in interval.as_dict().items()}
    return values | {"queries": queries}


def interval(values: dict[str, float], cfg: EvaluationConfig) -> Interval:
    return bootstrap_ci(list(values.values()), cfg.bootstrap_resamples, cfg.bootstrap_seed, cfg.confidence)


def summarize(per_query: PerQuery, cfg: EvaluationConfig) -> dict[str, Interval]:
    return {m: interval(values, cfg) for m, values in per_query.items()}


def evaluate_runs(eval_set: EvalSet, runs: dict[str, Run], cfg: EvaluationConfig, benchmark: str | None = None) -> EvalReport:
    """Score runs (view -> run) that were already made, by us or anyone."""
    name = benchmark or detect_benchmark(eval_set)
    bench = benchmark_named(name)
    per_query = bench.values(eval_set, runs, cfg)
    details = {**bench.details(eval_set, runs, cfg), "queries": {view: len(run) for view, run in runs.items()}}
    return EvalReport(name, eval_set.name, eval_set_digest(eval_set), per_query, summarize(per_query, cfg), details, runs)


def evaluate_model(encoder: TextEncoder, eval_set: EvalSet, cfg: EvaluationConfig, benchmark: str | None = None) -> EvalReport:
    """Encode, rank every view the benchmark needs, and score: the core of `dualview evaluate`."""
    name = benchmark or detect_benchmark(eval_set)
    runs = retrieve(encoder, eval_set, benchmark_named(name).views(eval_set), cfg)
    return evaluate_runs(eval_set, runs, cfg, name)



def score_runs(qrels_og: Qrels, qrels_changed: Qrels, run_og: Run, run_changed: Run, measures: list[str],
               cfg: EvaluationConfig, rule: str = "followir") -> dict:
    """`dualview score`: any system's og and changed runs -> p-MRR and pytrec_eval measures (×100,
    with intervals) of the og run against both qrels and of the changed run against qrels_changed."""
    changed = CHANGED_RULES[rule](qrels_og, qrels_changed)
    pmrr = scaled(p_mrr_per_query(run_og, run_changed, changed))
    out: dict = {P_MRR: as_json(interval(pmrr, cfg), len(pmrr))}
    for section, qrels, run in ((OG_RUN, qrels_og, run_og), (OG_RUN_VS_QRELS_CHANGED, qrels_changed, run_og),
                                (CHANGED_RUN, qrels_changed, run_changed)):
        values = {m: scaled(per_q) for m, per_q in per_query_measures(qrels, run, measures).items()}
        out[section] = {m: as_json(interval(per_q, cfg), len(per_q)) for m, per_q in values.items()}
    out["unscored_queries"] = unscored_queries(run_og, run_changed, changed)
    out["changed_documents"] = sum(len(d) for d in changed.values())
    out["scale"] = SCALE
    return out

