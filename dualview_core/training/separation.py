"""The instruction-separation diagnostic: how far apart the encoder puts q ⊕ I_orig and q ⊕ I_new.

The paper's mechanism is that dual views force the encoder to give the same query different
embeddings under complementary instructions; an instruction-agnostic encoder keeps them together.
This module owns the measurement on held-out dual-view pairs:

    separation = mean over pairs of  1 - cos(e(q ⊕ I_orig), e(q ⊕ I_new))

0 means the instruction changes nothing; it should grow while training on dual views. It takes any
`encode(texts) -> (n, dim) array` and knows nothing about training, ranks or MLflow.

    >>> import numpy as np
    >>> separation(lambda t: np.array([[1.0, 0.0] if "orig" in s else [0.0, 1.0] for s in t]),
    ...            [("q", "orig", "new")])
    1.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dualview_core.method.texts import query_text
from dualview_core.method.training_rows import TrainingRow

Pair = tuple[str, str, str]  # (query, original instruction, new instruction)


def pairs_of(rows: Sequence[TrainingRow]) -> list[Pair]:
    """(q, I_orig, I_new) of dual-view rows."""
    return [(r.query, r.original_instruction, r.instruction) for r in rows if r.original_instruction]


def separation(encode: Callable[[list[str]], np.ndarray], pairs: Sequence[Pair],
               template: str = "{query} {instruction}") -> float:
    """Mean cosine distance between each pair's two query embeddings."""
    if not pairs:
        raise ValueError("separation needs at least one held-out dual-view pair")
    texts = [query_text(q, i, template) for q, i, _ in pairs] + [query_text(q, i, template) for q, _, i in pairs]
    vectors = np.asarray(encode(texts), dtype=np.float64)  # (2 * pairs, dim)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)  # (2 * pairs, dim)
    orig, new = vectors[: len(pairs)], vectors[len(pairs):]  # (pairs, dim) each
    return float(np.mean(1.0 - (orig * new).sum(axis=1)))
