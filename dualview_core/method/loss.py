"""InfoNCE over a query's positive, its hard negatives and (optionally) every other row's documents.

Owns the loss math on plain embeddings and the mask that says which candidates each query is
contrasted with. It knows nothing about models, tokenisers, ranks or optimisers: the trainer
encodes, gathers across ranks and hands tensors in, so this file is tested on hand-made vectors
against a per-query loop.

Layout. Candidates come as an id matrix `candidates` of shape (rows, slots): row r holds row r's
document ids, its positive in slot 0, its hard negatives after, -1 (padding) in empty slots. Their
embeddings are the same matrix flattened row-major: candidate r * slots + s. The queries being
scored are rows [first, first + n) — with rows gathered from every rank, a rank's own queries sit
at its offset. For query i (row q = first + i), candidate c is allowed when

    c is not padding, and
    c belongs to row q, or in-batch negatives are on, and
    c is row q's positive slot, or c is a different document from row q's positive.

The last rule keeps a document that is this query's positive from being counted as its negative
when another row carries it (a dual view's old positive is its seed row's positive; a non-instruct
twin shares its instruct row's positive).

    loss_i = -log( exp(s(q_i, d+_i)/τ) / Σ_{c allowed} exp(s(q_i, c)/τ) ),   loss = mean_i loss_i
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dualview_core.method.negatives import PADDING

if TYPE_CHECKING:  # torch is heavy; imported where it is used
    import torch


def candidate_mask(candidates: torch.Tensor, first: int, n_queries: int,
                   in_batch: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(positive index per query (n_queries,), allowed (n_queries, rows * slots) bool)."""
    import torch

    rows, slots = candidates.shape
    flat = candidates.reshape(-1)  # (rows * slots,)
    query_rows = torch.arange(first, first + n_queries, device=flat.device)  # (n_queries,)
    positives = query_rows * slots  # (n_queries,)
    owner = torch.arange(rows, device=flat.device).repeat_interleave(slots)  # (rows * slots,)
    own = owner[None, :] == query_rows[:, None]  # (n_queries, rows * slots)
    allowed = (flat != PADDING)[None, :] & (own | in_batch)  # (n_queries, rows * slots)
    same_doc = flat[None, :] == flat[positives][:, None]  # (n_queries, rows * slots)
    slot = torch.arange(rows * slots, device=flat.device)  # (rows * slots,)
    is_positive = slot[None, :] == positives[:, None]  # (n_queries, rows * slots)
    return positives, allowed & (~same_doc | is_positive)


def info_nce(queries: torch.Tensor, docs: torch.Tensor, positives: torch.Tensor, allowed: torch.Tensor,
             temperature: float) -> torch.Tensor:
    """Mean InfoNCE of (n_queries, dim) queries against (n_docs, dim) docs, scored by dot product
    (cosine for unit vectors) in float32, over the allowed candidates. Returns a scalar."""
    import torch.nn.functional as F

    if not bool(allowed.gather(1, positives[:, None]).all()):
        raise ValueError("every query's positive must be an allowed candidate")
    scores = (queries.float() @ docs.float().T) / temperature  # (n_queries, n_docs)
    scores = scores.masked_fill(~allowed, float("-inf"))  # (n_queries, n_docs)
    return F.cross_entropy(scores, positives)


def scatter_valid(embeddings: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """Place the (n_valid, dim) embeddings of the non-padding slots, given row-major, into a
    (rows * slots, dim) matrix with zeros at padding (padding is masked out of the loss anyway)."""
    flat = candidates.reshape(-1)  # (rows * slots,)
    out = embeddings.new_zeros(flat.shape[0], embeddings.shape[1])  # (rows * slots, dim)
    out[flat != PADDING] = embeddings  # (rows * slots, dim)
    return out
