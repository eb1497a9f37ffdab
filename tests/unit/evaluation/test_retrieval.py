"""Ranking on hand-made vectors, the fast paths against brute force, and retrieval with the real MiniLM."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dualview_core.config import EvaluationConfig
from dualview_core.model import load_model, resolve_model
from dualview_core.method.texts import query_text
from dualview_core.data.evalsets import load_eval_set
from dualview_core.storage.filesystems import SourceError
from dualview_core.evaluation.retrieval import rank_candidates, rank_exact, rank_faiss, retrieve
from dualview_core.model import unit
from dualview_core.method.texts import doc_text
from dualview_core.sample import followir_path

DOCS = ["d1", "d2", "d3"]
D_EMB = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)  # (3, 2) unit rows
Q_EMB = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)  # (2, 2)


def test_unit_rows_and_doc_text():
    out = unit(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])
    assert doc_text("", "body") == "body" and doc_text("T", "body") == "T body"


def test_candidates_score_only_the_query_list():
    run = rank_candidates(["qa", "qb"], Q_EMB, DOCS, D_EMB, {"qa": ["d2", "d3"], "qb": ["d1", "d3"]})
    assert run["qa"] == pytest.approx({"d2": 0.0, "d3": 0.6})
    assert run["qb"] == pytest.approx({"d1": 0.0, "d3": 0.8})
    with pytest.raises(SourceError, match="no candidate documents"):
        rank_candidates(["qc"], Q_EMB[:1], DOCS, D_EMB, {})


def test_exact_search_keeps_top_k():
    run = rank_exact(["qa", "qb"], Q_EMB, DOCS, D_EMB, top_k=2, query_chunk=1)
    assert run["qa"] == pytest.approx({"d1": 1.0, "d3": 0.6})
    assert run["qb"] == pytest.approx({"d2": 1.0, "d3": 0.8})
    assert set(rank_exact(["qa"], Q_EMB[:1], DOCS, D_EMB, top_k=None)["qa"]) == set(DOCS)


def _random(n_q: int, n_d: int, dim: int = 16):
    rng = np.random.default_rng(0)
    return unit(rng.normal(size=(n_q, dim))), unit(rng.normal(size=(n_d, dim)))


def test_exact_search_matches_brute_force():
    q, d = _random(37, 200)
    ids, docs = [f"q{i}" for i in range(37)], [f"d{i}" for i in range(200)]
    run = rank_exact(ids, q, docs, d, top_k=10, query_chunk=8)
    for i, qid in enumerate(ids):
        scores = [float(np.dot(q[i], d[j])) for j in range(200)]  # the slow way, one pair at a time
        best = sorted(range(200), key=lambda j: -scores[j])[:10]
        assert set(run[qid]) == {docs[j] for j in best}
        assert run[qid] == pytest.approx({docs[j]: scores[j] for j in best}, abs=1e-6)


def test_faiss_flat_equals_exact_search():
    pytest.importorskip("faiss")
    q, d = _random(20, 300)
    ids, docs = [f"q{i}" for i in range(20)], [f"d{i}" for i in range(300)]
    exact, fast = rank_exact(ids, q, docs, d, top_k=15), rank_faiss(ids, q, docs, d, top_k=15)
    for qid in ids:
        assert set(fast[qid]) == set(exact[qid])
        assert fast[qid] == pytest.approx(exact[qid], abs=1e-5)


@pytest.fixture(scope="module")
def minilm():
    return load_model("minilm", max_length=256)


@pytest.fixture(scope="module")
def small_eval_set():
    """The bundled FollowIR sample cut to 3 queries and the documents they need."""
    es = load_eval_set(followir_path()).eval_set
    keep = pa.array(["q101", "q102", "q103"])
    top = es.top_ranked.filter(pc.is_in(es.top_ranked["query_id"], keep))
    docs = pa.array(sorted({d for ids in top["doc_ids"].to_pylist() for d in ids}))
    return dataclasses.replace(
        es, corpus=es.corpus.filter(pc.is_in(es.corpus["doc_id"], docs)),
        queries=es.queries.filter(pc.is_in(es.queries["query_id"], keep)), top_ranked=top)


def test_retrieve_reranks_candidates_with_cosines_equal_to_sentence_transformers(minilm, small_eval_set):
    from sentence_transformers import SentenceTransformer

    cfg = EvaluationConfig(batch_size=16)
    views = {v: small_eval_set.queries_for(v) for v in ("og", "changed")}
    runs = retrieve(minilm, small_eval_set, views, cfg)
    candidates = small_eval_set.candidates()
    assert {q: set(docs) for q, docs in runs["og"].items()} == {q: set(c) for q, c in candidates.items()}
    st = SentenceTransformer(resolve_model("minilm"), device="cpu")
    query, instruction = views["changed"]["q102"]
    corpus = {r["doc_id"]: doc_text(r["title"], r["text"]) for r in small_eval_set.corpus.to_pylist()}
    doc_ids = candidates["q102"]
    q_vec = st.encode([query_text(query, instruction)], normalize_embeddings=True)[0]
    d_vecs = st.encode([corpus[d] for d in doc_ids], normalize_embeddings=True)
    reference = dict(zip(doc_ids, (d_vecs @ q_vec).tolist()))
    assert runs["changed"]["q102"] == pytest.approx(reference, abs=1e-5)


def test_retrieve_without_candidates_ranks_the_whole_corpus(minilm, small_eval_set):
    es = dataclasses.replace(small_eval_set, top_ranked=None)
    runs = retrieve(minilm, es, {"og": es.queries_for("og")}, EvaluationConfig(top_k=5))
    assert sorted(runs["og"]) == ["q101", "q102", "q103"]
    assert all(len(docs) == 5 for docs in runs["og"].values())
