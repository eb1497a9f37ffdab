"""dualview_core.storage.tables.read_ahead: the same items in the same order, produced ahead of the
caller on one thread, errors where they happen, and the source closed when the caller stops."""

from __future__ import annotations

import threading

import pytest

from dualview_core.storage.tables import read_ahead


def test_items_come_in_order_and_are_produced_ahead_of_the_caller():
    made, caller = [], threading.get_ident()
    threads = set()
    depth = 3
    produced_ahead = threading.Semaphore(0)

    def items():
        for i in range(10):
            threads.add(threading.get_ident())
            made.append(i)
            produced_ahead.release()
            yield i

    out = read_ahead(items(), depth=depth)
    assert next(out) == 0
    for _ in range(depth + 1):  # the first item, then `depth` more queued while the caller holds it
        assert produced_ahead.acquire(timeout=5)
    assert not produced_ahead.acquire(timeout=0.2)  # and no further than `depth` ahead
    assert made == list(range(depth + 1))
    assert list(out) == list(range(1, 10))
    assert threads and caller not in threads


def test_an_error_comes_out_at_its_item_after_the_items_before_it():
    def items():
        yield "a"
        yield "b"
        raise ValueError("row group 2 is damaged")

    seen = []
    with pytest.raises(ValueError, match="row group 2 is damaged"):
        for item in read_ahead(items(), depth=4):
            seen.append(item)
    assert seen == ["a", "b"]


def test_stopping_early_closes_the_source():
    closed = threading.Event()

    def items():
        try:
            yield from range(1000)
        finally:
            closed.set()

    source = items()  # held here too: the source is closed by read_ahead, not by being freed
    out = read_ahead(source, depth=2)
    assert [next(out), next(out)] == [0, 1]
    out.close()
    assert closed.is_set()


def test_stopping_while_an_item_is_in_production_waits_for_it_then_closes_the_source():
    producing, release, closed = threading.Event(), threading.Event(), threading.Event()

    def items():
        try:
            yield 0
            producing.set()
            release.wait(5)  # a slow row group
            yield 1
        finally:
            closed.set()

    source = items()
    out = read_ahead(source, depth=1)
    assert next(out) == 0
    assert producing.wait(5)
    threading.Timer(0.2, release.set).start()
    out.close()  # would raise "generator already executing" if it did not wait
    assert closed.is_set()


def test_nothing_in_gives_nothing_out():
    assert list(read_ahead([], depth=2)) == []


def test_the_module_doctests_hold():
    import doctest

    from dualview_core.storage import tables

    result = doctest.testmod(tables)
    assert result.attempted and result.failed == 0
