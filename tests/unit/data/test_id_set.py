"""The compact identity set agrees with a Python set, across folds, and stays small."""

from __future__ import annotations

import doctest
import random

from dualview_core.data import id_set
from dualview_core.data.id_set import IdSet


def test_the_module_example_holds():
    assert doctest.testmod(id_set).failed == 0


def test_membership_agrees_with_a_python_set_across_folds():
    rng = random.Random(7)
    names = [f"q{rng.randrange(5000)}\x1f{rng.randrange(2)}" for _ in range(4000)]
    ours, reference = IdSet(fold_at=97), set()
    for name in names:
        assert (name in ours) == (name in reference), name
        ours.add(name)
        reference.add(name)
    assert len(ours) == len(reference)
    assert all(n in ours for n in reference)
    assert not any(f"absent-{i}" in ours for i in range(1000))


def test_a_million_identities_take_tens_of_megabytes():
    seen = IdSet()
    for i in range(200_000):
        seen.add(f"query-{i:09d}\x1f1")
    seen._fold()
    assert seen._old.nbytes == 200_000 * 24  # 24 bytes a member once folded
