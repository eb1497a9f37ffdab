"""Training rows: seeds and dual views in one shape; epochs walk rows deterministically, split by rank."""

from __future__ import annotations

import pytest

from dualview_core.method.dual_view import make_dual_view
from dualview_core.data.seeds import SeedValidator
from dualview_core.data.sources import RawRow
from dualview_core.method.training_rows import (
    Source,
    corrupt,
    epoch_order,
    from_dual_view,
    from_seed,
    rank_batches,
    total_steps,
)
from tests.helpers.factories import promptriever_row


@pytest.fixture
def seed() -> dict:
    return SeedValidator().check(RawRow(0, promptriever_row("q1", n_neg=3, n_inst_neg=2)))


def ids(passages) -> list[str]:
    return [p.doc_id for p in passages]


def test_seed_row_keeps_its_roles(seed):
    row = from_seed(seed)
    assert row.source is Source.INSTRUCT and row.key == seed["seed_key"] and row.seed_key == seed["seed_key"]
    assert row.positive.doc_id == "q1-pos"
    assert ids(row.instruction_negatives) == ["q1-i0", "q1-i1"]
    assert ids(row.negatives) == ["q1-n0", "q1-n1", "q1-n2"]
    twin = from_seed(SeedValidator().check(RawRow(1, promptriever_row("q1", instruct=False))))
    assert twin.source is Source.NON_INSTRUCT and twin.instruction == "" and twin.instruction_negatives == ()


def test_dual_view_row_puts_the_old_positive_first(seed):
    view = make_dual_view(seed, "Only industrial silos.", target_index=1, prompt_version="p", model_id="m")
    row = from_dual_view(view)
    assert row.source is Source.DUAL_VIEW and row.key == view["dual_view_key"] and row.seed_key == seed["seed_key"]
    assert row.positive.doc_id == "q1-i1" and row.instruction == "Only industrial silos."
    assert ids(row.instruction_negatives) == ["q1-pos", "q1-i0"]  # the old positive, then the other N_i
    assert ids(row.negatives) == ["q1-n0", "q1-n1", "q1-n2"]
    assert row.original_instruction == seed["instruction"]


@pytest.mark.parametrize("n_inst_neg", [1, 2, 5])
def test_both_views_sample_their_instruction_negatives_first(n_inst_neg):
    from dualview_core.method.negatives import sample_negatives

    seed = SeedValidator().check(RawRow(0, promptriever_row("q1", n_neg=40, n_inst_neg=n_inst_neg)))
    original = from_seed(seed)
    view = from_dual_view(make_dual_view(seed, "Only silos.", target_index=0, prompt_version="p", model_id="m"))
    for epoch in (0, 1):
        drawn = ids(sample_negatives(view, 30, epoch=epoch, seed=7))
        assert len(drawn) == 30 and drawn[:n_inst_neg] == ["q1-pos"] + [f"q1-i{i}" for i in range(1, n_inst_neg)]
        assert "q1-i0" not in drawn  # N*, the view's positive
        drawn = ids(sample_negatives(original, 30, epoch=epoch, seed=7))
        assert drawn[:n_inst_neg] == [f"q1-i{i}" for i in range(n_inst_neg)] and "q1-pos" not in drawn


def test_corruption_changes_instruction_and_key_only(seed):
    row = from_dual_view(make_dual_view(seed, "A.", prompt_version="p", model_id="m"))
    bad = corrupt(row, "B.")
    assert bad.instruction == "B." and bad.corrupted and bad.key != row.key
    assert (bad.positive, bad.negatives, bad.query) == (row.positive, row.negatives, row.query)
    assert corrupt(row, "B.").key == bad.key and corrupt(row, "C.").key != bad.key


def test_total_steps():
    # 66 rows, 4 per rank, 2 ranks: 8 micro-batches per epoch
    assert total_steps(66, batch_size=4, world_size=2, grad_accumulation=1, epochs=1.0, max_steps=None) == 8
    assert total_steps(66, batch_size=4, world_size=2, grad_accumulation=2, epochs=2.5, max_steps=None) == 10
    assert total_steps(66, batch_size=4, world_size=2, grad_accumulation=1, epochs=1.0, max_steps=3) == 3
    with pytest.raises(ValueError, match="do not fill one global batch"):
        total_steps(7, batch_size=4, world_size=2, grad_accumulation=1, epochs=1.0, max_steps=None)


def test_epoch_order_is_a_pure_permutation():
    order = epoch_order(10, epoch=0, seed=0)
    assert sorted(order) == list(range(10))
    assert order == epoch_order(10, epoch=0, seed=0)
    assert order != epoch_order(10, epoch=1, seed=0) and order != epoch_order(10, epoch=0, seed=1)


def test_ranks_split_each_global_batch():
    order = epoch_order(11, epoch=3, seed=7)
    r0 = rank_batches(11, batch_size=2, epoch=3, seed=7, rank=0, world_size=2)
    r1 = rank_batches(11, batch_size=2, epoch=3, seed=7, rank=1, world_size=2)
    # global batches of 4: order[0:4], order[4:8]; the last 3 rows do not fill one and are dropped
    assert r0 == [order[0:2], order[4:6]] and r1 == [order[2:4], order[6:8]]
    alone = rank_batches(11, batch_size=2, epoch=3, seed=7, rank=0, world_size=1)
    assert alone == [order[i:i + 2] for i in range(0, 10, 2)]
