"""Streaming synthesis: when planning feeds the engine directly, and which calls the engine answered
(every key sent is found; one never sent is an error unless the caller knows some were sent for rows
the plan then left out)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from dualview_core.data.chunks import Chunk
from dualview_core.synthesis.cache_index import fixed_width
from tasks.synthesis.planning import FirstPass, streams
from tasks.synthesis.publishing import Answered


def job(limit: int | None) -> FirstPass:
    pieces = (Chunk("seeds", "parquet", rows=500), Chunk("seeds", "parquet", rows=500))
    return FirstPass("seeds", None, pieces, None, SimpleNamespace(cfg=SimpleNamespace(limit=limit)), None, "run")


def test_planning_feeds_the_engine_unless_a_limit_waits_on_the_whole_plan():
    assert streams(job(limit=None))
    assert not streams(job(limit=100))


def test_answers_are_matched_to_the_calls_sent():
    sent = Answered(pa.array(["k3", "k1", "k2"]))
    sent.mark(pa.array(["k2"]))
    sent.mark(fixed_width(pa.array(["k3"])))  # fixed-width keys, as a stream's summaries are kept
    assert sent.missing() == ["k1"]
    with pytest.raises(RuntimeError, match="not sent: .*k9"):
        sent.mark(pa.array(["k1", "k9"]))


def test_known_only_ignores_calls_sent_for_rows_the_plan_left_out():
    sent = Answered(pa.array(["k1", "k2"]))
    sent.mark(fixed_width(pa.array(["k0", "k2", "k9"])), known_only=True)
    assert sent.missing() == ["k1"]
    nothing = Answered(pa.array([], pa.string()))
    nothing.mark(fixed_width(pa.array(["k5"])), known_only=True)
    assert nothing.missing() == []
    with pytest.raises(RuntimeError, match="not sent"):
        nothing.mark(pa.array(["k5"]))
