"""The geometry filter: does adding I_new move the query toward the new positive N*?

    delta = cos(f(q ⊕ I_new), f(N*)) − cos(f(q), f(N*))       with f a frozen encoder

Keep a dual view only when delta > 0. This asks for the right direction, not for N* to already
outrank the old positive (training is what achieves that; demanding it up front would throw away
the most useful rows). It does not know where the rows come from or go.
"""

from __future__ import annotations

from collections.abc import Sequence

from dualview_core.model import TextEncoder, unit
from dualview_core.method.texts import doc_text, query_text


def geometry_deltas(encoder: TextEncoder, queries: Sequence[str], instructions: Sequence[str],
                    targets: Sequence[tuple[str, str]]) -> list[float]:
    """One delta per (query, new instruction, (title, text) of N*)."""
    n = len(queries)
    if n == 0:
        return []
    with_instruction = unit(encoder.encode_query([query_text(q, i) for q, i in zip(queries, instructions)]))  # (n, dim)
    bare = unit(encoder.encode_query(list(queries)))  # (n, dim)
    docs = unit(encoder.encode_document([doc_text(title, text) for title, text in targets]))  # (n, dim)
    # rows are unit vectors, so the row-wise dot product is the cosine
    return [float(x) for x in (with_instruction * docs).sum(1) - (bare * docs).sum(1)]  # (n,)
