"""Training rows: one shape for every row a mixture can hold, and how an epoch walks them.

A mixture mixes three kinds of row — an original instruct seed, its non-instruct twin, and a dual
view — and the trainer should not care which is which. This module owns the one shape they share,
`TrainingRow`, the conversion of SEED_ROW and DUAL_VIEW_ROW dicts into it, and the deterministic
order in which an epoch visits rows on each rank. It does not know how rows are chosen (`mixtures`),
how negatives are sampled (`negatives`) or how text is encoded.

    seed       (q, I,     P+, negatives, instruction negatives N1..Nk)
               -> TrainingRow(q, I,     positive=P+, instruction_negatives=(N1..Nk), negatives)
    dual view  (q, I_new, N*, instruction negatives [P+] + other N_i, negatives)
               -> TrainingRow(q, I_new, positive=N*, instruction_negatives=(P+, other N_i), negatives)

For a dual view the old positive is the first instruction negative: on topic, and wrong only because
of the instruction. The other N_i keep their role, as in the paper: the synthesis prompt asks for an
I_new under which they stay excluded, so they are kept (never sampled away) in both views.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from dualview_core.contracts import Passage
from dualview_core.keys import canonical_json, digest

T = TypeVar("T")


class Source(StrEnum):
    """Where a training row came from. Values are stable: mixtures count rows by them."""

    INSTRUCT = "instruct"
    NON_INSTRUCT = "non_instruct"
    DUAL_VIEW = "dual_view"


@dataclass(frozen=True, slots=True)
class TrainingRow:
    key: str  # content key: the seed_key, the dual_view_key, or a corrupted dual view's key
    source: Source
    query_id: str
    seed_key: str  # the seed the row derives from (a dual view's own seed)
    query: str
    instruction: str  # "" for a non-instruct row
    positive: Passage
    instruction_negatives: tuple[Passage, ...]  # always kept, in this order
    negatives: tuple[Passage, ...]  # sampled from
    original_instruction: str = ""  # dual views: I_orig, for the separation diagnostic
    corrupted: bool = False  # dual views whose instruction was swapped for another seed's


def _passages(values) -> tuple[Passage, ...]:
    return tuple(Passage(p["doc_id"], p["title"], p["text"]) for p in values)


def from_seed(row: Mapping) -> TrainingRow:
    """A SEED_ROW dict -> its training row. Promptriever rows have one positive; with several, the
    first is trained on and the others are never used as negatives."""
    return TrainingRow(
        key=row["seed_key"],
        source=Source.INSTRUCT if row["has_instruction"] else Source.NON_INSTRUCT,
        query_id=row["query_id"],
        seed_key=row["seed_key"],
        query=row["query"],
        instruction=row["instruction"],
        positive=_passages(row["positives"][:1])[0],
        instruction_negatives=_passages(row["instruction_negatives"]),
        negatives=_passages(row["negatives"]),
    )


def from_dual_view(row: Mapping) -> TrainingRow:
    """A DUAL_VIEW_ROW dict -> its training row; the old positive leads the instruction negatives."""
    forced = _passages(row["instruction_negatives"])
    if not forced:
        raise ValueError(f"dual view {row['dual_view_key']} has no instruction negatives; the old positive should lead them")
    return TrainingRow(
        key=row["dual_view_key"],
        source=Source.DUAL_VIEW,
        query_id=row["query_id"],
        seed_key=row["seed_key"],
        query=row["query"],
        instruction=row["instruction"],
        positive=_passages([row["positive"]])[0],
        instruction_negatives=forced,
        negatives=_passages(row["negatives"]),
        original_instruction=row["original_instruction"],
    )


def corrupted_key(key: str, instruction: str) -> str:
    """The key of the row `key` under someone else's instruction."""
    return digest(canonical_json([key, "corrupted", instruction]))


def corrupt(item: T, instruction: str) -> T:
    """The same dual view under someone else's instruction, with a key of its own: the corruption
    control's one swap, for a `TrainingRow` and for a mixture's reference to one (`mixtures.RowRef`)."""
    return dataclasses.replace(item, key=corrupted_key(item.key, instruction), instruction=instruction, corrupted=True)


# --- epochs ---------------------------------------------------------------------------------------


def total_steps(n_rows: int, *, batch_size: int, world_size: int, grad_accumulation: int, epochs: float,
                max_steps: int | None) -> int:
    """Optimizer steps of a run: `max_steps` if set, else `epochs` passes. A pass holds only complete
    global batches, so every rank runs the same number of micro-batches (a rank left waiting in a
    collective for a batch that never comes would hang); micro-batches run on across epochs.

        >>> total_steps(66, batch_size=4, world_size=2, grad_accumulation=2, epochs=1.0, max_steps=None)
        4
    """
    per_epoch = n_rows // (batch_size * world_size)  # micro-batches per rank per epoch
    if per_epoch == 0:
        raise ValueError(f"{n_rows} rows do not fill one global batch of {batch_size} x {world_size} ranks")
    if max_steps is not None:
        return max_steps
    return max(1, int(epochs * per_epoch) // grad_accumulation)


def epoch_order(n_rows: int, epoch: int, seed: int) -> list[int]:
    """A permutation of range(n_rows), a pure function of (epoch, seed) — the same on every rank."""
    def rank(i: int) -> str:
        return digest(canonical_json([seed, epoch, i]), 8)

    return sorted(range(n_rows), key=rank)


def rank_batches(n_rows: int, batch_size: int, epoch: int, seed: int, rank: int, world_size: int) -> list[list[int]]:
    """This rank's micro-batches for one epoch: global batch g holds rows order[g*B*W : (g+1)*B*W],
    and rank r takes the r-th slice of B. Incomplete global batches are dropped.

        >>> rank_batches(5, batch_size=1, epoch=0, seed=0, rank=1, world_size=2) == \\
        ...     [[epoch_order(5, 0, 0)[1]], [epoch_order(5, 0, 0)[3]]]
        True
    """
    order = epoch_order(n_rows, epoch, seed)
    span = batch_size * world_size
    return [order[g + rank * batch_size : g + (rank + 1) * batch_size] for g in range(0, n_rows - span + 1, span)]
