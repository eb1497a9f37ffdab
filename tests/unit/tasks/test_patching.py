"""The merge that keeps the last run's derived rows (tasks/synthesis/patching.py): two streams in
locator order, cut into batches anywhere, come out as one in locator order; and the report's tallies."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from tasks.synthesis.patching import Tally, merged


def stream(rows: list[tuple[int, str]], rng: random.Random):
    """(table, locators) batches of `rows` (locator, tag), cut at random places."""
    at = 0
    while at < len(rows):
        n = rng.randint(1, 5)
        part = rows[at:at + n]
        at += n
        yield pa.table({"tag": [t for _, t in part]}), np.array([loc for loc, _ in part], dtype=np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_two_streams_in_locator_order_merge_into_one(seed):
    rng = random.Random(seed)
    seeds = sorted(rng.sample(range(1000), rng.randint(0, 30)))
    rows = [(loc, f"{loc}.{i}") for loc in seeds for i in range(rng.randint(1, 3))]  # a seed's rows stay together
    kept = {loc for loc in seeds if rng.random() < 0.7}
    a = [r for r in rows if r[0] in kept]
    b = [r for r in rows if r[0] not in kept]
    got = [tag for table in merged(stream(a, rng), stream(b, rng)) for tag in table["tag"].to_pylist()]
    assert got == [tag for _, tag in rows]


def test_tallies_subtract_only_what_they_hold():
    base = Tally()
    base.add([{"rejection": None, "guard": "chatter", "attempts": 1, "completion_tokens": 5},
              {"rejection": "no_answer", "guard": None, "attempts": 1, "completion_tokens": 7},
              {"rejection": "prompt_too_long", "guard": None, "attempts": 0, "completion_tokens": None}])
    gone = Tally()
    gone.add([{"rejection": "no_answer", "guard": None, "attempts": 1, "completion_tokens": 7}])
    left = base.without(gone)
    assert left.as_dict() == {"outcomes": {"accepted": 1, "prompt_too_long": 1}, "guards": {"chatter": 1},
                              "lengths": {"5": 1}}
    assert Tally.of(left.as_dict()) == left and left.plus(gone).as_dict() == base.as_dict()
    assert gone.without(base) is None  # more taken than held: not the same rows
