"""Dense retrieval for evaluation: encode the corpus once, encode each view's queries, rank by cosine.

Owns turning an encoder and an eval set into runs ({query_id: {doc_id: score}}). Two settings:

- reranking (FollowIR): each query is scored against its own top-ranked candidate list only;
- full retrieval: each query against the whole corpus, keeping the top_k; exact brute force in
  numpy by default, or a FAISS index (an optional package, imported only when asked for).

The encoder is anything with `encode_query` / `encode_document(texts, batch_size=...) -> (n, dim)
array` — a `SentenceTransformer` — so a folder's query and document prompts apply as
sentence-transformers applies them (it also sorts by length). Vectors are L2-normalised here again,
so the score is a cosine whatever the encoder returns. It knows nothing about metrics, files or
services.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dualview_core.contracts import Run
from dualview_core.storage.filesystems import SourceError
from dualview_core.model import TextEncoder, unit

from dualview_core.method.texts import doc_text, query_text

if TYPE_CHECKING:
    from dualview_core.config import EvaluationConfig
    from dualview_core.contracts import EvalSet

ViewQueries = Mapping[str, tuple[str, str]]  # query_id -> (query, instruction)


class SharedDocuments:
    """An encoder that encodes each distinct document text once for as long as it lives: a suite's
    tasks that share documents (InfoSearch's subsets, say) pay for them once per model. Queries
    pass through. Holds one vector per distinct document, keyed by a 16-byte digest of its text."""

    def __init__(self, encoder: TextEncoder):
        self.encoder = encoder
        self.vectors: dict[bytes, np.ndarray] = {}  # digest -> (dim,)
        self.encoded = 0  # documents actually sent to the encoder

    def encode_query(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return self.encoder.encode_query(texts, batch_size=batch_size)

    def encode_document(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        import hashlib

        keys = [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in texts]
        new = {k: t for k, t in zip(keys, texts) if k not in self.vectors}
        if new:
            vectors = np.asarray(self.encoder.encode_document(list(new.values()), batch_size=batch_size))  # (n_new, dim)
            self.vectors.update(zip(new, vectors))
            self.encoded += len(new)
        return np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, 0), dtype=np.float32)


def encode_corpus(encoder: TextEncoder, eval_set: EvalSet, batch_size: int) -> tuple[list[str], np.ndarray]:
    """(doc_ids, (n_docs, dim) unit vectors), in corpus order."""
    rows = eval_set.corpus.to_pylist()
    texts = [doc_text(r["title"], r["text"]) for r in rows]
    return [r["doc_id"] for r in rows], unit(encoder.encode_document(texts, batch_size=batch_size))


def encode_queries(encoder: TextEncoder, queries: ViewQueries, template: str, batch_size: int) -> tuple[list[str], np.ndarray]:
    """(query_ids, (n_queries, dim) unit vectors) of query ⊕ instruction, in `queries` order."""
    ids = list(queries)
    texts = [query_text(*queries[q], template=template) for q in ids]
    return ids, unit(encoder.encode_query(texts, batch_size=batch_size))


def rank_candidates(query_ids: Sequence[str], q_emb: np.ndarray, doc_ids: Sequence[str], d_emb: np.ndarray,
                    candidates: Mapping[str, Sequence[str]]) -> Run:
    """Each query scored against its own candidate list only (FollowIR's reranking setting)."""
    position = {d: i for i, d in enumerate(doc_ids)}
    run: Run = {}
    for row, query_id in enumerate(query_ids):
        if query_id not in candidates:
            raise SourceError(f"query {query_id!r} has no candidate documents (top_ranked); a reranking eval set "
                              "needs a list for every query")
        cand = [d for d in candidates[query_id] if d in position]
        idx = np.fromiter((position[d] for d in cand), dtype=np.int64, count=len(cand))  # (n_cand,)
        scores = d_emb[idx] @ q_emb[row]  # (n_cand,)
        run[query_id] = dict(zip(cand, scores.tolist()))
    return run


def rank_exact(query_ids: Sequence[str], q_emb: np.ndarray, doc_ids: Sequence[str], d_emb: np.ndarray,
               top_k: int | None, query_chunk: int = 1024) -> Run:
    """Brute-force cosine against the whole corpus, keeping each query's top_k (None: all)."""
    k = len(doc_ids) if top_k is None else min(top_k, len(doc_ids))
    run: Run = {}
    for start in range(0, len(query_ids), query_chunk):
        scores = q_emb[start : start + query_chunk] @ d_emb.T  # (chunk, n_docs)
        if k < len(doc_ids):
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # (chunk, k), unordered
        else:
            top = np.broadcast_to(np.arange(len(doc_ids)), scores.shape)  # (chunk, n_docs)
        kept = np.take_along_axis(scores, top, axis=1)  # (chunk, k)
        for row, (idx, vals) in enumerate(zip(top.tolist(), kept.tolist())):
            run[query_ids[start + row]] = {doc_ids[i]: v for i, v in zip(idx, vals)}
    return run


def rank_faiss(query_ids: Sequence[str], q_emb: np.ndarray, doc_ids: Sequence[str], d_emb: np.ndarray,
               top_k: int | None, factory: str = "Flat") -> Run:
    """The same search through a FAISS inner-product index (exact for 'Flat')."""
    try:
        import faiss
    except ImportError as exc:
        raise RuntimeError("search='faiss' needs the optional package faiss-cpu (pip install faiss-cpu)") from exc
    index = faiss.index_factory(d_emb.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        index.train(np.ascontiguousarray(d_emb))
    index.add(np.ascontiguousarray(d_emb))
    k = len(doc_ids) if top_k is None else min(top_k, len(doc_ids))
    scores, top = index.search(np.ascontiguousarray(q_emb), k)  # (n_queries, k) each; -1 = no hit
    return {q: {doc_ids[i]: v for i, v in zip(idx, vals) if i >= 0}
            for q, idx, vals in zip(query_ids, top.tolist(), scores.tolist())}


def retrieve(encoder: TextEncoder, eval_set: EvalSet, views: Mapping[str, ViewQueries], cfg: EvaluationConfig) -> dict[str, Run]:
    """view name -> run. The corpus is encoded once and shared by every view."""
    doc_ids, d_emb = encode_corpus(encoder, eval_set, cfg.batch_size)  # d_emb: (n_docs, dim)
    candidates = eval_set.candidates()
    runs: dict[str, Run] = {}
    for view, queries in views.items():
        q_ids, q_emb = encode_queries(encoder, queries, cfg.query_template, cfg.batch_size)  # (n_q, dim)
        if candidates is not None:
            runs[view] = rank_candidates(q_ids, q_emb, doc_ids, d_emb, candidates)
        elif cfg.search == "faiss":
            runs[view] = rank_faiss(q_ids, q_emb, doc_ids, d_emb, cfg.top_k, cfg.faiss_factory)
        else:
            runs[view] = rank_exact(q_ids, q_emb, doc_ids, d_emb, cfg.top_k, cfg.query_chunk)
    return runs
