"""Instruction-following measures on plain dicts: qrels and runs in, per-query values out.

Owns what each measure *is*: FollowIR's p-MRR, which documents count as "changed" (FollowIR's and
InfoSearch's rules), the Score measures (computed by pytrec_eval, never by hand), InstructIR's
robustness@10, and the names metrics are logged under. It does not
know about encoders, files, services or confidence intervals.

p-MRR follows mteb's `calculate_pmrr` / `rank_score` (mteb/_evaluators/retrieval_metrics.py):

- a document's rank is its 1-based position in the run sorted by (score, doc_id) descending — the
  tie-break of trec_eval and of mteb since its fix #5092 — and a document missing from a run ranks
  len(run) + 1;
- per changed document: (1/og_rank)/(1/new_rank) - 1 if og_rank >= new_rank, else
  1 - (1/new_rank)/(1/og_rank); it is positive when the document falls under the changed instruction;
- mean per query, then mean over queries; a query without changed documents, or absent from
  either run, drops out (mteb skips it too).

    >>> p_mrr({"a": {"0": 1, "1": 2, "2": 3, "3": 4}}, {"a": {"0": 4, "1": 1, "2": 2, "3": 3}}, {"a": ["0"]})
    -0.75
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from dualview_core.contracts import Qrels, Run

Changed = dict[str, list[str]]  # query_id -> the documents whose label changed

# --- names --------------------------------------------------------------------------------------

P_MRR = "p-MRR"
SCORE = "score"  # the subset's Score measure on the og run against qrels_og (mteb 2.x)
# the same run against qrels_changed: what mteb 1.x reported, its loader having swapped the two qrels
SCORE_MTEB1 = "score_mteb1"
NDCG_10 = "ndcg_cut_10"  # the pytrec_eval measure
NDCG_AT_10 = "ndcg@10"  # the name MAIR's nDCG@10 is reported under
NDCG_5 = "ndcg_cut_5"
MAP_1000 = "map_cut_1000"
ROBUSTNESS_10 = "robustness@10"
CI_LOW, CI_HIGH = "_ci_low", "_ci_high"
QUARANTINED = "quarantined"  # rows of an eval set left out of its metrics (per table: quarantined/<table>)
# sections of `dualview score`: which run is scored against which qrels
OG_RUN, OG_RUN_VS_QRELS_CHANGED, CHANGED_RUN = "og_run", "og_run_vs_qrels_changed", "changed_run"
SCALE = 100.0  # FollowIR reports p-MRR and Score ×100


def metric_key(benchmark: str, subset: str | None, metric: str, suffix: str = "") -> str:
    """The one place metric names are assembled: 'followir/core17/p-MRR_ci_low', 'followir/score'."""
    parts = [benchmark] + ([subset] if subset else []) + [metric + suffix]
    return "/".join(parts)


# --- p-MRR --------------------------------------------------------------------------------------


def rank_reference(docs: Mapping[str, float], doc_id: str) -> int:
    """The definition, slowly: sort the whole run, find the document. Tests compare `ranks` to it."""
    order = sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)
    for position, (candidate, _) in enumerate(order, start=1):
        if candidate == doc_id:
            return position
    return len(order) + 1


def ranks(docs: Mapping[str, float], targets: Iterable[str]) -> dict[str, int]:
    """The ranks of `targets` in one query's run, without sorting it: 1 + the number of documents
    ahead, i.e. with a higher score, or the same score and a larger doc_id."""
    targets = list(targets)
    present = [t for t in targets if t in docs]
    out = {t: len(docs) + 1 for t in targets}
    if not present:
        return out
    scores = np.fromiter(docs.values(), dtype=np.float64, count=len(docs))  # (n_docs,)
    wanted = np.array([docs[t] for t in present], dtype=np.float64)  # (n_targets,)
    above = (scores[None, :] > wanted[:, None]).sum(axis=1)  # (n_targets,)
    tied = (scores[None, :] == wanted[:, None]).sum(axis=1)  # (n_targets,) includes the target
    keys = None
    for target, ahead, n_tied in zip(present, above.tolist(), tied.tolist()):
        if n_tied > 1:  # rare with real scores: look at the tied ids only
            keys = keys if keys is not None else list(docs)
            same = np.flatnonzero(scores == docs[target])
            ahead += sum(1 for i in same if keys[i] > target)
        out[target] = ahead + 1
    return out


def rank_change_score(og_rank: int, new_rank: int) -> float:
    """FollowIR's per-document score, written in the reference's operation order (exact floats)."""
    if og_rank >= new_rank:
        return ((1 / og_rank) / (1 / new_rank)) - 1
    return 1 - ((1 / new_rank) / (1 / og_rank))


def p_mrr_per_query(run_og: Run, run_changed: Run, changed: Changed) -> dict[str, float]:
    """query_id -> mean rank-change score over its changed documents (not ×100)."""
    out: dict[str, float] = {}
    for query_id, docs in changed.items():
        if not docs or query_id not in run_og or query_id not in run_changed:
            continue
        og, new = ranks(run_og[query_id], docs), ranks(run_changed[query_id], docs)
        out[query_id] = float(np.mean([rank_change_score(og[d], new[d]) for d in docs]))
    return out


def p_mrr(run_og: Run, run_changed: Run, changed: Changed) -> float:
    """Mean over queries of `p_mrr_per_query` (not ×100); NaN when no query has changed documents."""
    values = list(p_mrr_per_query(run_og, run_changed, changed).values())
    return float(np.mean(values)) if values else float("nan")


def unscored_queries(run_og: Run, run_changed: Run, changed: Changed) -> list[str]:
    """Queries with changed documents that p-MRR had to skip because a run lacks them."""
    return sorted(q for q, docs in changed.items() if docs and (q not in run_og or q not in run_changed))


def followir_changed(qrels_og: Qrels, qrels_changed: Qrels) -> Changed:
    """FollowIR: the documents judged under the og instruction whose label differs under the changed
    one (mteb's `create_qrel_diff`). A document the changed qrels do not judge counts as label 0."""
    out: Changed = {}
    for query_id, docs in qrels_og.items():
        after = qrels_changed.get(query_id, {})
        out[query_id] = [d for d, rel in docs.items() if after.get(d, 0) != rel]
    return out


def infosearch_changed(qrels_first: Qrels, qrels_second: Qrels) -> Changed:
    """InfoSearch: documents relevant under the first qrels (no instruction) and not under the second
    (with it) — its `create_qrel_match` negatives: label differs and is 0 under the second."""
    out: Changed = {}
    for query_id, docs in qrels_first.items():
        after = qrels_second.get(query_id, {})
        out[query_id] = [d for d, rel in docs.items() if after.get(d, 0) != rel and after.get(d, 0) == 0]
    return out


# --- pytrec_eval measures -----------------------------------------------------------------------


def pytrec_measure(name: str) -> tuple[str, str]:
    """('map_cut_1000' or 'map_cut.1000') -> ('map_cut.1000', 'map_cut_1000'): the name pytrec_eval
    is asked for and the key it answers under. Unknown measures are a ValueError."""
    import pytrec_eval

    base, _, cut = name.replace(".", "_").rpartition("_")
    if base and cut.isdigit() and base in pytrec_eval.supported_measures:
        return f"{base}.{cut}", f"{base}_{cut}"
    if name in pytrec_eval.supported_measures:
        return name, name
    raise ValueError(f"unknown measure {name!r}; pytrec_eval knows {sorted(pytrec_eval.supported_measures)} (with _k cut-offs)")


def per_query_measures(qrels: Qrels, run: Run, measures: Iterable[str]) -> dict[str, dict[str, float]]:
    """measure key -> query_id -> value, by pytrec_eval, for the queries both qrels and run hold."""
    import pytrec_eval

    pairs = [pytrec_measure(m) for m in measures]
    judged = {q: docs for q, docs in qrels.items() if docs}
    evaluator = pytrec_eval.RelevanceEvaluator(judged, {asked for asked, _ in pairs})
    scores = evaluator.evaluate({q: docs for q, docs in run.items() if q in judged})
    return {key: {q: values[key] for q, values in scores.items()} for _, key in pairs}


# --- other benchmarks ---------------------------------------------------------------------------


def robustness_at_10(ndcg10: Mapping[str, float], groups: Mapping[str, str]) -> dict[str, float]:
    """InstructIR: group -> the minimum nDCG@10 over the group's instruction variants."""
    out: dict[str, float] = {}
    for query_id, value in ndcg10.items():
        group = groups.get(query_id, query_id)
        out[group] = min(value, out.get(group, value))
    return out
