"""Negatives: instruction negatives first, the rest a pure function of (row key, epoch, seed)."""

from __future__ import annotations

import dataclasses

import pytest

from dualview_core.contracts import Passage
from dualview_core.method.negatives import (
    PADDING,
    NegativesError,
    available,
    block_width,
    doc_number,
    make_batch,
    sample_negatives,
)
from dualview_core.method.training_rows import Source, TrainingRow


def passage(doc_id: str) -> Passage:
    return Passage(doc_id, f"T{doc_id}", f"text of {doc_id}")


def row(key: str = "k1", n_inst: int = 2, n_neg: int = 8, instruction: str = "Only Europe.") -> TrainingRow:
    return TrainingRow(
        key=key, source=Source.INSTRUCT, query_id=key, seed_key=key, query=f"query {key}", instruction=instruction,
        positive=passage(f"{key}-pos"),
        instruction_negatives=tuple(passage(f"{key}-i{i}") for i in range(n_inst)),
        negatives=tuple(passage(f"{key}-n{i}") for i in range(n_neg)),
    )


def ids(passages) -> list[str]:
    return [p.doc_id for p in passages]


def test_instruction_negatives_come_first_then_a_sample_of_the_rest():
    got = ids(sample_negatives(row(), 5, epoch=0, seed=0))
    assert got[:2] == ["k1-i0", "k1-i1"]
    assert len(got) == 5 and len(set(got)) == 5 and set(got[2:]) <= {f"k1-n{i}" for i in range(8)}
    # pinned: a change here silently changes every run's training data
    assert got[2:] == ["k1-n3", "k1-n6", "k1-n0"]  # blake2b-64 of [key, epoch, seed, doc_id], ascending


def test_sampling_is_a_pure_function_of_key_epoch_and_seed():
    r = row()
    first = sample_negatives(r, 4, epoch=0, seed=0)
    assert first == sample_negatives(r, 4, epoch=0, seed=0)
    draws = {tuple(ids(sample_negatives(r, 4, epoch=e, seed=0))) for e in range(6)}
    assert len(draws) > 1  # epochs see different negatives
    assert all(d[:2] == ("k1-i0", "k1-i1") for d in draws)  # but always the instruction negatives
    assert sample_negatives(row("k2"), 4, epoch=0, seed=0) != first  # another row draws its own


def test_fewer_negatives_than_k_uses_all_of_them():
    got = ids(sample_negatives(row(n_inst=1, n_neg=3), 30, epoch=0, seed=0))
    assert got[0] == "k1-i0" and sorted(got[1:]) == ["k1-n0", "k1-n1", "k1-n2"]


def test_k_below_the_instruction_negatives_keeps_the_first_ones():
    assert ids(sample_negatives(row(n_inst=3), 2, epoch=0, seed=0)) == ["k1-i0", "k1-i1"]
    assert sample_negatives(row(), 0, epoch=0, seed=0) == ()


def test_the_positive_and_repeats_are_never_negatives():
    r = row(n_inst=1, n_neg=2)
    r = dataclasses.replace(r, negatives=(r.positive, passage("k1-i0"), passage("k1-n0")))
    assert ids(sample_negatives(r, 30, epoch=0, seed=0)) == ["k1-i0", "k1-n0"]
    assert available(r) == 2


def test_block_width_falls_back_or_fails_clearly():
    rows = [row("a", n_inst=1, n_neg=5), row("b", n_inst=2, n_neg=6)]  # 6 and 8 negatives
    assert block_width(rows, 30, strict=False) == 8
    assert block_width(rows, 7, strict=False) == 7
    assert block_width(rows, 6, strict=True) == 6
    with pytest.raises(NegativesError, match=r"1 of 2 rows have fewer \(the most any row has is 8, the fewest 6\)"):
        block_width(rows, 7, strict=True)
    with pytest.raises(NegativesError, match="no training rows"):
        block_width([], 3, strict=False)


def test_batch_layout_positive_first_padding_last():
    rows = [row("a", n_inst=1, n_neg=1), row("b", n_inst=1, n_neg=3, instruction="")]
    batch = make_batch(rows, 3, epoch=0, seed=0, template="{instruction} || {query}")
    assert batch.queries == ["Only Europe. || query a", "query b"]  # an empty instruction leaves the query
    a, b = batch.candidates
    assert a == [doc_number("a-pos"), doc_number("a-i0"), doc_number("a-n0"), PADDING]
    assert b[:2] == [doc_number("b-pos"), doc_number("b-i0")] and PADDING not in b
    assert len(batch.docs) == 3 + 4 and batch.docs[0] == "Ta-pos text of a-pos"
    assert doc_number("a-pos") == doc_number("a-pos") >= 0 and doc_number("a-pos") != doc_number("b-pos")
