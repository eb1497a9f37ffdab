"""The geometry filter's delta, cos(q ⊕ I, N*) − cos(q, N*), on a hand-written encoder whose vectors
are looked up by the exact strings geometry_deltas builds (query_text for q ⊕ I, doc_text for N*), so
every expected value is computed by hand below. No vector is unit length: the function normalises."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dualview_core.synthesis.geometry import geometry_deltas


class LookupEncoder:
    """encode_query / encode_document as a dict lookup: an unknown string is a KeyError, so a test fails
    if the function asks for any text other than the ones written here. Every call is recorded."""

    def __init__(self, queries: dict[str, tuple[float, ...]], documents: dict[str, tuple[float, ...]]):
        self.queries, self.documents = queries, documents
        self.calls: list[tuple[str, list[str]]] = []

    def encode_query(self, texts: list[str]) -> np.ndarray:
        self.calls.append(("query", list(texts)))
        return np.array([self.queries[t] for t in texts], dtype=np.float32)  # (n, dim)

    def encode_document(self, texts: list[str]) -> np.ndarray:
        self.calls.append(("document", list(texts)))
        return np.array([self.documents[t] for t in texts], dtype=np.float32)  # (n, dim)


# Row 1, delta > 0: the instruction turns the query toward N*.
#   q       (3, 0, 0)  -> unit (1, 0, 0)
#   q ⊕ I   (2, 2, 0)  -> unit (1/√2, 1/√2, 0)
#   N*      (0, 5, 0)  -> unit (0, 1, 0)
#   delta = 1/√2 − 0 = 0.70711   (unnormalised dot products would give 10 − 0 = 10)
# Row 2, delta < 0: the instruction turns the query away from N*.
#   q       (0, 2, 0)  -> unit (0, 1, 0)
#   q ⊕ I   (4, 3, 0)  -> unit (0.8, 0.6, 0)
#   N*      (0, 0.5, 0) -> unit (0, 1, 0)
#   delta = 0.6 − 1 = −0.4
# Row 3, delta > 0 in three dimensions, N* without a title (doc_text is then the body alone).
#   q       (1, 2, 2)  -> unit (1/3, 2/3, 2/3)        (length 3)
#   q ⊕ I   (0, 0, 4)  -> unit (0, 0, 1)              (length 4)
#   N*      (0, 0, 7)  -> unit (0, 0, 1)              (length 7)
#   delta = 1 − 2/3 = 1/3
QUERIES = {
    "wind power": (3, 0, 0),
    "wind power Only offshore farms.": (2, 2, 0),  # query_text: "{query} {instruction}"
    "solar panels": (0, 2, 0),
    "solar panels Only rooftop kits.": (4, 3, 0),
    "heat pumps": (1, 2, 2),
    "heat pumps Only ground-source systems.": (0, 0, 4),
}
DOCUMENTS = {
    "Offshore Turbines at sea.": (0, 5, 0),  # doc_text: "{title} {text}"
    "Utility Solar farms on fields.": (0, 0.5, 0),
    "Boreholes carry heat from the ground.": (0, 0, 7),  # empty title: no leading space
}


def test_deltas_by_hand_positive_negative_and_three_dimensional():
    encoder = LookupEncoder(QUERIES, DOCUMENTS)
    deltas = geometry_deltas(
        encoder,
        ["wind power", "solar panels", "heat pumps"],
        ["Only offshore farms.", "Only rooftop kits.", "Only ground-source systems."],
        [("Offshore", "Turbines at sea."), ("Utility", "Solar farms on fields."),
         ("", "Boreholes carry heat from the ground.")],
    )
    assert deltas == pytest.approx([1 / math.sqrt(2), -0.4, 1 / 3], abs=1e-6)
    assert deltas[0] > 0 and deltas[1] < 0 and deltas[2] > 0  # the filter keeps rows 1 and 3, drops row 2
    assert all(type(d) is float for d in deltas)
    # one batch each, in row order: q ⊕ I, then the bare queries, then the targets
    assert encoder.calls == [
        ("query", ["wind power Only offshore farms.", "solar panels Only rooftop kits.",
                   "heat pumps Only ground-source systems."]),
        ("query", ["wind power", "solar panels", "heat pumps"]),
        ("document", ["Offshore Turbines at sea.", "Utility Solar farms on fields.",
                      "Boreholes carry heat from the ground."]),
    ]


def test_an_empty_instruction_leaves_the_query_so_the_delta_is_zero():
    # query_text(q, "") is q itself: q ⊕ I and q are the same vector, (3, 0, 0), so delta = 0 − 0 = 0
    encoder = LookupEncoder(QUERIES, DOCUMENTS)
    assert geometry_deltas(encoder, ["wind power"], [""], [("Offshore", "Turbines at sea.")]) == [0.0]
    assert encoder.calls[0] == ("query", ["wind power"])


def test_only_the_direction_counts_not_the_length():
    # q ⊕ I = 10 · q: the same unit vector, so delta = 0 whatever N* is; N* = (0, 5, 0) vs q = (1, 2, 2)/3
    encoder = LookupEncoder({"heat pumps": (1, 2, 2), "heat pumps Louder.": (10, 20, 20)}, DOCUMENTS)
    [delta] = geometry_deltas(encoder, ["heat pumps"], ["Louder."], [("Offshore", "Turbines at sea.")])
    assert delta == pytest.approx(0.0, abs=1e-6)


def test_no_rows_no_deltas_and_no_encoder_call():
    encoder = LookupEncoder({}, {})
    assert geometry_deltas(encoder, [], [], []) == []
    assert encoder.calls == []
