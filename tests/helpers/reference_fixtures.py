"""Small seeded eval sets and runs for the reference-parity tests, written in the layouts our loader reads.

Built to hit the cases where implementations drift: scores rounded to two decimals (so many ties),
documents judged but missing from a run, a query whose labels do not change, labels 0/1/2, labels
changed to 0 and from 0 (FollowIR counts both, InfoSearch only the first). Document ids never equal
query ids (mteb 1.x dropped such pairs before scoring). Runs are dicts whose insertion order is
(score, doc_id) descending, so a reference that breaks ties by run order (mteb 1.x, InfoSearch)
ranks them as one that breaks them by doc id does (mteb 2.x, trec_eval, ours).

    >>> folder, runs = followir_fixture(tmp, "core17", seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _write_qrels(path: Path, qrels: Qrels) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["query-id", "corpus-id", "score"])
        for q, docs in qrels.items():
            for d, rel in docs.items():
                w.writerow([q, d, rel])


def ordered(run: dict[str, float]) -> dict[str, float]:
    """The run with its documents inserted in (score, doc_id) descending order."""
    return dict(sorted(run.items(), key=lambda item: (item[1], item[0]), reverse=True))


def _run(rng: np.random.Generator, docs: list[str], keep: float) -> dict[str, float]:
    kept = [d for d in docs if rng.random() < keep]
    return ordered({d: float(np.round(rng.random(), 2)) for d in kept})


def instruction_sets(seed: int, n_queries: int = 6, reversed_view: bool = False) -> dict:
    """Queries, candidates, og/changed(/reversed) qrels and runs for og and changed(/reversed) views."""
    rng = np.random.default_rng(seed)
    out: dict = {"docs": {}, "queries": [], "qrels": {"og": {}, "changed": {}}, "runs": {"og": {}, "changed": {}}}
    if reversed_view:
        out["qrels"]["reversed"], out["runs"]["reversed"] = {}, {}
    for i in range(n_queries):
        q = f"q{i}"
        cands = [f"d{i}-{j:02d}" for j in range(int(rng.integers(20, 41)))]
        out["docs"].update({d: f"text of {d}" for d in cands})
        judged = [d for d in cands if rng.random() < 0.5]
        og = {d: int(rng.choice([0, 1, 2], p=[0.4, 0.4, 0.2])) for d in judged}
        og[judged[0]] = max(og[judged[0]], 1)  # at least one relevant document
        changed = dict(og)
        if i != 0:  # q0: no label changes
            for d, rel in og.items():
                if rel > 0 and rng.random() < 0.5:
                    changed[d] = 0
                elif rel == 0 and rng.random() < 0.2:  # a change FollowIR counts and InfoSearch does not
                    changed[d] = 1
        out["qrels"]["og"][q], out["qrels"]["changed"][q] = og, changed
        row = {"_id": q, "text": f"query {i}", "instruction_og": f"og {i}", "instruction_changed": f"changed {i}"}
        if reversed_view:
            out["qrels"]["reversed"][q] = {d: int(rel == 0) for d, rel in og.items()}
            row["instruction_reversed"] = f"reversed {i}"
        out["queries"].append(row)
        out["candidates"] = out.get("candidates", {}) | {q: cands}
        for view in out["runs"]:
            out["runs"][view][q] = _run(rng, cands, keep=0.9)  # ~10% of candidates missing from each run
    return out


def write_original_layout(folder: Path, data: dict) -> Path:
    """corpus.jsonl, queries.jsonl, qrels_<view>.tsv, top_ranked.jsonl: FollowIR's / InfoSearch's layout."""
    folder.mkdir(parents=True, exist_ok=True)
    _write_jsonl(folder / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in data["docs"].items()])
    _write_jsonl(folder / "queries.jsonl", data["queries"])
    for view, qrels in data["qrels"].items():
        _write_qrels(folder / f"qrels_{view}.tsv", qrels)
    _write_jsonl(folder / "top_ranked.jsonl", [{"qid": q, "pid": c} for q, c in data["candidates"].items()])
    return folder


def mair_split(seed: int, n_queries: int) -> tuple[list[dict], list[dict], Run]:
    """MAIR's layout (queries with labels, corpus of id/doc) and an og run over the whole corpus."""
    rng = np.random.default_rng(seed)
    docs = [f"doc{seed}-{j:02d}" for j in range(30)]
    corpus = [{"id": d, "doc": f"text of {d}"} for d in docs]
    queries, run = [], {}
    for i in range(n_queries):
        q = f"m{seed}-{i}"
        labels = [{"id": d, "score": int(rng.choice([0, 1, 2]))} for d in docs if rng.random() < 0.2]
        labels.append({"id": docs[i], "score": 1})
        queries.append({"qid": q, "query": f"query {i}", "instruction": "find it", "labels": labels})
        run[q] = _run(rng, docs, keep=0.8)
    return queries, corpus, run


def write_mair_layout(folder: Path, queries: list[dict], corpus: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _write_jsonl(folder / "queries.jsonl", queries)
    _write_jsonl(folder / "corpus.jsonl", corpus)
    return folder
