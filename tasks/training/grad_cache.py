"""Gradient caching for one micro-batch: a step's memory bounded by one chunk of texts, not by the batch.

Owns the two passes of GradCache (Gao et al., 2021; tevatron's GradCache, sentence-transformers'
`CachedMultipleNegativesRankingLoss`) around the DeepSpeed engine:

1. `embed_without_graphs`: every chunk through the engine under `no_grad`, the RNG state saved
   before each — the micro-batch's embeddings as one leaf tensor, in chunk order;
2. the caller computes the loss on those embeddings (in-batch negatives gathered across ranks as in
   an uncached step) and back-propagates it to the leaf only: the gradient w.r.t. each embedding;
3. `backward_chunks`: each chunk again, with its graph and its saved RNG state (the same dropout
   mask as in pass 1), and `engine.backward((embeddings * cached_grad).sum())` — the surrogate whose
   gradient w.r.t. the weights is the chunk's share of the loss's. Summed over chunks it is the
   uncached step's gradient (a test compares them at fp32 tolerance, dropout on).

DeepSpeed sees several backward calls per micro-batch, so the gradient-accumulation boundary is
set explicitly: only the last chunk of the last micro-batch of an optimizer step is a boundary (ZeRO
0-1 reduce there, once; ZeRO-2 reduce-scatters on every backward and accumulates its partition, as
it does across accumulated micro-batches). Because ZeRO-2's reductions are collectives, every rank
must call backward equally often: a rank with fewer chunks than the most any rank has (its rows had
fewer negatives) runs its shortest chunk again with a zero gradient, which adds nothing.

Memory: pass 1 keeps (texts, dim) embeddings; pass 3 one chunk's activations at a time. What it
must not know: the loss, the candidates' layout, the tokeniser — the caller hands chunks and a loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is heavy; imported where it is used
    import torch


@dataclass
class RngState:
    """The CPU generator's state and, on a GPU, the current device's: what dropout draws from."""

    cpu: torch.Tensor
    cuda: torch.Tensor | None

    @classmethod
    def capture(cls) -> RngState:
        import torch

        return cls(torch.get_rng_state(), torch.cuda.get_rng_state() if torch.cuda.is_available() else None)

    def restore(self) -> None:
        import torch

        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda)


@dataclass
class Cache:
    """Pass 1's result: the embeddings as one leaf (texts, dim) that will receive the loss's
    gradient, the chunk sizes along it, and the RNG state before each chunk."""

    embeddings: torch.Tensor
    sizes: list[int]
    states: list[RngState]


def embed_without_graphs(engine, chunks: list[tuple[dict, str]]) -> Cache:
    """Every (chunk, role) through the engine without keeping its graph; (texts, dim) in chunk order."""
    import torch

    states, parts = [], []
    for chunk, role in chunks:
        states.append(RngState.capture())
        with torch.no_grad():
            parts.append(engine([chunk], role))  # (chunk, dim)
    embeddings = torch.cat(parts).requires_grad_()  # (texts, dim), a leaf
    return Cache(embeddings, [len(p) for p in parts], states)


def backward_chunks(engine, chunks: list[tuple[dict, str]], cache: Cache, *, boundary: bool, pad_to: int = 0) -> None:
    """Pass 3: each chunk again with its graph and RNG state, its cached gradient back-propagated
    through the engine; then zero-gradient repeats of the shortest chunk up to `pad_to` backward
    calls. `boundary`: this micro-batch ends an optimizer step (its last backward reduces)."""
    import torch

    if cache.embeddings.grad is None:
        raise ValueError("the loss was not back-propagated to the cached embeddings")
    grads = torch.split(cache.embeddings.grad, cache.sizes)  # per chunk: (chunk, dim)
    after = RngState.capture()  # where an uncached step leaves the generator
    jobs = [(chunk, state, grad) for chunk, state, grad in zip(chunks, cache.states, grads)]
    shortest = min(range(len(chunks)), key=lambda i: chunks[i][0]["input_ids"].numel())
    jobs += [(chunks[shortest], cache.states[shortest], torch.zeros_like(grads[shortest]))] * (pad_to - len(jobs))
    for i, ((chunk, role), state, grad) in enumerate(jobs):
        state.restore()
        out = engine([chunk], role)  # (chunk, dim), with its graph
        engine.set_gradient_accumulation_boundary(boundary and i == len(jobs) - 1)
        engine.backward((out.float() * grad.float()).sum())
    after.restore()
