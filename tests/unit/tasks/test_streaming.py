"""Streaming synthesis: when planning feeds the engine directly, how large its blocks and shards are
before any row is read, and which calls the engine answered (every key sent is found; one never sent
is an error unless the caller knows some were sent for rows the plan then left out)."""

from __future__ import annotations

import doctest
import os
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dualview_core.data import chunks
from dualview_core.data.chunks import Chunk
from dualview_core.synthesis.cache_index import fixed_width
from tasks.synthesis import planning
from tasks.synthesis.planning import FirstPass, stream_block_bytes, streams
from tasks.synthesis.publishing import Answered
from tasks.synthesis.record_store import RecordStore


def job(limit: int | None, pieces: int = 2) -> FirstPass:
    chunked = tuple(Chunk("seeds", "parquet", rows=500) for _ in range(pieces))
    return FirstPass("seeds", None, chunked, None, SimpleNamespace(cfg=SimpleNamespace(limit=limit)), None, "run")


def test_planning_feeds_the_engine_unless_a_limit_waits_on_the_whole_plan():
    assert streams(job(limit=None))
    assert not streams(job(limit=100))
    assert not streams(job(limit=None, pieces=0))  # a source without a row: nothing to stream, an empty plan


def test_the_stream_moves_in_blocks_of_about_one_engine_batch():
    assert doctest.testmod(planning).failed == 0
    assert stream_block_bytes(256) == 256 * planning.STAGED_CALL_BYTES  # the openai engine at concurrency 64
    assert stream_block_bytes(16) == planning.MIN_STREAM_BLOCK_BYTES  # a vLLM batch: no smaller blocks than this
    assert stream_block_bytes(1024) > stream_block_bytes(256)


def test_a_chunk_says_how_many_rows_to_expect_before_it_is_read():
    assert doctest.testmod(chunks).failed == 0
    assert Chunk("s.parquet", "parquet", 0, 3, rows=700).expected_rows == 700
    assert Chunk("s.jsonl", "jsonl", 1 << 20, 3 << 20).expected_rows == (2 << 20) // chunks.GUESS_ROW_BYTES
    assert Chunk("s.jsonl", "jsonl", 0, 100).expected_rows == 1  # a tiny tail still counts
    assert Chunk("data", "hf").expected_rows is None  # nothing known before reading


def test_answers_are_matched_to_the_calls_sent():
    sent = Answered(pa.array(["k3", "k1", "k2"]))
    sent.mark(pa.array(["k2"]))
    sent.mark(fixed_width(pa.array(["k3"])))  # fixed-width keys, as a stream's summaries are kept
    assert sent.missing() == ["k1"]
    with pytest.raises(RuntimeError, match="not sent: .*k9"):
        sent.mark(pa.array(["k1", "k9"]))


def test_known_only_ignores_calls_sent_for_rows_the_plan_left_out():
    sent = Answered(pa.array(["k1", "k2"]))
    assert sent.mark(fixed_width(pa.array(["k0", "k2", "k9"])), known_only=True).tolist() == [b"k0", b"k9"]
    assert sent.missing() == ["k1"]
    nothing = Answered(pa.array([], pa.string()))
    assert nothing.mark(fixed_width(pa.array(["k5"])), known_only=True).tolist() == [b"k5"]
    assert nothing.missing() == []
    with pytest.raises(RuntimeError, match="not sent"):
        nothing.mark(pa.array(["k5"]))


def test_an_answer_is_unstaged_only_when_no_plan_part_staged_it(tmp_path):
    store = RecordStore(str(tmp_path))
    for c, staged in enumerate([[["k1", "k2"], None], [[], ["k3"]], [None]]):
        part = pa.Table.from_pylist([{"staged": s} for s in staged], schema=pa.schema([("staged", pa.list_(pa.string()))]))
        os.makedirs(store.work(planning.PLANNED), exist_ok=True)
        pq.write_table(part, f"{store.work(planning.PLANNED)}/{c:06d}.parquet")
    keys = fixed_width(pa.array(["k3", "k9", "k1", "k0"]))
    assert planning.unstaged(store, keys).tolist() == [b"k9", b"k0"]
    assert planning.unstaged(store, fixed_width(pa.array(["k2"]))).tolist() == []
    assert planning.unstaged(RecordStore(str(tmp_path / "none")), keys).tolist() == keys.tolist()
