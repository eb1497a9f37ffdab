"""Hard negatives per training row, and the candidate block a batch of rows contrasts against.

Owns which K negatives a row trains with: its instruction negatives first (all of them, in order —
for a dual view that is the old positive), then the rest drawn from its ordinary negatives by a pure
function of (row key, epoch, seed), so any rank, rerun or resumed run draws the same ones. When a
row has fewer than K it uses all it has, unless the run is strict. It also lays a batch out as the
loss expects: one row of candidate ids per training row, positive first, -1 for padding.
It does not know about tensors, models or how rows were chosen.

    row: positive P, instruction_negatives (N1,), negatives (a, b, c, d);  K = 3
    -> (N1, x, y) with {x, y} the two of {a, b, c, d} ranked first by hash(row key, epoch, seed, doc_id)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dualview_core.contracts import Passage
from dualview_core.method.texts import query_text
from dualview_core.keys import canonical_json, digest
from dualview_core.method.texts import doc_text
from dualview_core.method.training_rows import TrainingRow

PADDING = -1  # candidate id of an empty slot


class NegativesError(ValueError):
    """The data cannot give what the negatives configuration asks for."""


def _distinct(passages: Sequence[Passage], taken: set[str]) -> list[Passage]:
    """Passages whose doc_id is not taken yet (first occurrence wins); marks them taken."""
    out = []
    for p in passages:
        if p.doc_id not in taken:
            taken.add(p.doc_id)
            out.append(p)
    return out


def _split(row: TrainingRow) -> tuple[list[Passage], list[Passage]]:
    """(instruction negatives, ordinary negatives), without the positive or repeats."""
    taken = {row.positive.doc_id}
    return _distinct(row.instruction_negatives, taken), _distinct(row.negatives, taken)


def available(row: TrainingRow) -> int:
    """Distinct negatives the row has (none equal to its positive)."""
    forced, pool = _split(row)
    return len(forced) + len(pool)


def sample_negatives(row: TrainingRow, k: int, *, epoch: int, seed: int) -> tuple[Passage, ...]:
    """Up to k negatives: instruction negatives first, then ordinary ones ranked by a keyed hash."""
    forced, pool = _split(row)
    forced = forced[:k]

    def rank(p: Passage) -> str:
        return digest(canonical_json([row.key, epoch, seed, p.doc_id]), 8)

    return tuple(forced) + tuple(sorted(pool, key=rank)[: k - len(forced)])


def block_width(rows: Sequence[TrainingRow], k: int, *, strict: bool) -> int:
    """Negative slots per row for a run: k, or fewer when no row has k (padding stays small).

    Strict runs fail here, before any model is loaded, if a row has fewer than k negatives.
    """
    if not len(rows):
        raise NegativesError("no training rows")
    known = getattr(rows, "available_negatives", None)  # a stored mixture counted them when it was built
    counts = known() if known else [available(r) for r in rows]
    short = sum(c < k for c in counts)
    if strict and short:
        raise NegativesError(
            f"negatives={k} is strict, but {short} of {len(rows)} rows have fewer (the most any "
            f"row has is {max(counts)}, the fewest {min(counts)}); lower negatives, or turn "
            "strict_negatives off so such rows use all they have"
        )
    return min(k, max(counts))


def doc_number(doc_id: str) -> int:
    """A stable non-negative 63-bit id for a document, the same on every rank without a vocabulary."""
    return int(digest(doc_id.encode(), 8), 16) >> 1


@dataclass(frozen=True)
class TextBatch:
    """A micro-batch as text. `candidates[i]` lists row i's document ids: positive, negatives, then
    PADDING up to 1 + width; `docs` holds the texts of the non-padding slots in row-major order."""

    queries: list[str]  # (batch,)
    docs: list[str]  # (n_valid,)
    candidates: list[list[int]]  # (batch, 1 + width)


def make_batch(rows: Sequence[TrainingRow], width: int, *, epoch: int, seed: int, template: str) -> TextBatch:
    queries, docs, candidates = [], [], []
    for row in rows:
        passages = (row.positive, *sample_negatives(row, width, epoch=epoch, seed=seed))
        queries.append(query_text(row.query, row.instruction, template))
        docs.extend(doc_text(p.title, p.text) for p in passages)
        ids = [doc_number(p.doc_id) for p in passages]
        candidates.append(ids + [PADDING] * (1 + width - len(ids)))
    return TextBatch(queries, docs, candidates)
