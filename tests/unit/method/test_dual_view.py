"""Dual-view construction: N* becomes the positive, P+ leads the instruction negatives, the other N_i
keep their role and the ordinary negatives stay as they were."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dualview_core.contracts import DUAL_VIEW_ROW, conform
from dualview_core.method.dual_view import make_dual_view
from dualview_core.data.seeds import SeedValidator
from dualview_core.data.sources import RawRow
from tests.helpers.factories import promptriever_row


@pytest.fixture
def seed() -> dict:
    return SeedValidator().check(RawRow(0, promptriever_row("q1", n_neg=4, n_inst_neg=3)))


def ids(passages) -> list[str]:
    return [p["doc_id"] for p in passages]


@pytest.mark.parametrize(
    "n_inst_neg, target, positive, forced",
    [
        (1, 0, "q1-i0", ["q1-pos"]),  # no remaining instruction negative
        (2, 1, "q1-i1", ["q1-pos", "q1-i0"]),  # one
        (4, 0, "q1-i0", ["q1-pos", "q1-i1", "q1-i2", "q1-i3"]),  # several, in the seed's order
        (4, 2, "q1-i2", ["q1-pos", "q1-i0", "q1-i1", "q1-i3"]),
    ],
)
def test_roles_swap_and_the_remaining_instruction_negatives_keep_theirs(n_inst_neg, target, positive, forced):
    seed = SeedValidator().check(RawRow(0, promptriever_row("q1", n_neg=4, n_inst_neg=n_inst_neg)))
    row = make_dual_view(seed, "Only industrial storage.", target_index=target, prompt_version="p1", model_id="m")
    assert row["positive"]["doc_id"] == positive
    assert ids(row["instruction_negatives"]) == forced
    assert ids(row["negatives"]) == ["q1-n0", "q1-n1", "q1-n2", "q1-n3"]
    assert row["query"] == seed["query"] and row["original_instruction"] == seed["instruction"]
    assert row["seed_key"] == seed["seed_key"]
    conform(pa.Table.from_pylist([row], schema=DUAL_VIEW_ROW), DUAL_VIEW_ROW)


def test_key_depends_on_target_and_instruction(seed):
    a = make_dual_view(seed, "A.", prompt_version="p", model_id="m")
    assert a["dual_view_key"] == make_dual_view(seed, "A.", prompt_version="other", model_id="m")["dual_view_key"]
    assert a["dual_view_key"] != make_dual_view(seed, "B.", prompt_version="p", model_id="m")["dual_view_key"]
    assert a["dual_view_key"] != make_dual_view(seed, "A.", target_index=1, prompt_version="p", model_id="m")["dual_view_key"]


def test_missing_target_is_an_error(seed):
    with pytest.raises(ValueError, match="has 3 instruction negative"):
        make_dual_view(seed, "A.", target_index=3, prompt_version="p", model_id="m")
