"""The instruction-separation diagnostic: mean cosine distance of q ⊕ I_orig and q ⊕ I_new."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dualview_core.contracts import Passage
from dualview_core.training.separation import pairs_of, separation
from dualview_core.method.training_rows import Source, TrainingRow

VECTORS = {  # text -> a hand-placed embedding (not unit length: separation normalises)
    "q A": [2.0, 0.0],
    "q B": [0.0, 3.0],  # 90 degrees from "q A": distance 1
    "r A": [1.0, 0.0],
    "r C": [0.5, math.sqrt(3) / 2],  # 60 degrees from "r A": distance 0.5
}


def encode(texts: list[str]) -> np.ndarray:
    return np.array([VECTORS[t] for t in texts])


def test_hand_computed_distances():
    assert separation(encode, [("q", "A", "B")]) == pytest.approx(1.0)
    assert separation(encode, [("r", "A", "C")]) == pytest.approx(0.5)
    assert separation(encode, [("q", "A", "B"), ("r", "A", "C")]) == pytest.approx(0.75)
    assert separation(encode, [("q", "A", "A")]) == pytest.approx(0.0)


def test_template_shapes_the_query_text():
    seen = []
    separation(lambda t: seen.extend(t) or np.ones((len(t), 2)), [("q", "A", "B")], template="{instruction}: {query}")
    assert seen == ["A: q", "B: q"]


def test_pairs_come_from_dual_view_rows_only():
    p = Passage("d", "", "t")
    view = TrainingRow("k", Source.DUAL_VIEW, "q1", "s", "q", "I_new", p, (), (), original_instruction="I_orig")
    seed = TrainingRow("s", Source.INSTRUCT, "q1", "s", "q", "I_orig", p, (), ())
    assert pairs_of([seed, view]) == [("q", "I_orig", "I_new")]
    with pytest.raises(ValueError, match="at least one held-out"):
        separation(encode, [])
