"""The first pass's plan rows, resolved over all chunks in any order, decide what the sequential
validator decides: the same duplicates, report, seed map and limit; and the chunked readers number
rows exactly as the sequential reader does."""

from __future__ import annotations

import json
import random

import fsspec
import numpy as np
import pyarrow as pa
import pytest

from dualview_core.data.chunks import cut, locator, read_chunk
from dualview_core.config import ValidationConfig
from dualview_core.contracts import Rejected
from dualview_core.data.loading import read_seeds
from dualview_core.synthesis.plan import PlanBuilder, PlanRows, with_calls
from dualview_core.data.seeds import select_synthesis_seeds, validate
from dualview_core.data.sources import iter_raw
from tests.helpers.factories import promptriever_row, write_jsonl, write_parquet


def messy_rows() -> list:
    """Valid rows, duplicates (same content and changed content), bad rows and blank lines, mixed."""
    rows: list = []
    for i in range(40):
        rows.append(promptriever_row(f"q{i}", instruct=i % 3 != 0, n_inst_neg=i % 4))
    rows[7] = "{not json"
    rows[11] = {**promptriever_row("q11"), "positive_passages": []}
    rows.insert(20, promptriever_row("q5", instruct=False))  # q5 is instruct: its twin, not a duplicate
    rows.insert(25, promptriever_row("q4"))  # the same content again: a duplicate
    rows.insert(30, {**promptriever_row("q2"), "only_query": "changed"})  # q2 again, changed: a duplicate
    rows.insert(33, "")
    return rows


def plan_of(chunks, fs, shuffle: int | None = None, limit: int | None = None, parts: int | None = None):
    """The resolved plan; with `parts`, each chunk's plan rows are added in tables of that many rows,
    last part first (Ray Data may hand a task's output back in several blocks)."""
    builder = PlanBuilder()
    order = list(range(len(chunks)))
    if shuffle is not None:
        random.Random(shuffle).shuffle(order)
    for c in order:
        rows = PlanRows(c)
        for batch in read_chunk(fs, chunks[c], batch_rows=5):
            for raw in batch:
                result = validate(raw, ValidationConfig())
                if isinstance(result, Rejected):
                    rows.quarantined(raw.index, result.reason)
                else:
                    keys = [f"{result['seed_key']}:0"]
                    rows.valid(raw.index, result, staged=keys, calls=1)
        table = rows.table()
        step = parts or max(table.num_rows, 1)
        for start in reversed(range(0, table.num_rows, step)):
            builder.add(table.slice(start, step))
    return builder.resolve(limit)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("chunk_size", [1, 700, 5_000, 1 << 30])
def test_chunks_in_any_order_resolve_to_the_sequential_validators_decisions(tmp_path, fmt, chunk_size):
    rows = messy_rows()
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "s.jsonl", rows)
        kind, sizes = "jsonl", {"chunk_bytes": chunk_size}
    else:
        path = write_parquet(tmp_path / "s.parquet", [r for r in rows if isinstance(r, dict)], row_group_size=4)
        kind, sizes = "parquet", {"chunk_rows": max(1, chunk_size // 700)}
    fs = fsspec.filesystem("file")
    chunks = cut(fs, kind, [str(path)], **sizes)
    sequential = read_seeds(str(path))
    plan = plan_of(chunks, fs, shuffle=chunk_size)

    assert plan.report == sequential.report.as_dict()
    positions = [plan.offsets[c] + r for c, r in (divmod(int(x), 1 << 32) for x in plan.duplicates)]
    assert positions == [q["row_index"] for q in sequential.quarantine.to_pylist() if q["reason"] == "duplicate_id"]
    assert len(positions) == 2
    expected = select_synthesis_seeds(sequential.seeds)
    assert plan.seed_map.to_pylist() == expected.select(["query_id", "seed_key"]).to_pylist()
    assert plan.staged.to_pylist() == [f"{k}:0" for k in expected["seed_key"].to_pylist()]
    assert plan.cached == 0 and len(plan.recorded) == 0
    # the duplicate with the same content staged its call too; the resolved plan leaves it out
    dup_with_calls = [int(x) for x in plan.duplicates]
    assert set(plan.drop.tolist()) <= set(dup_with_calls) and len(plan.drop) == 2


@pytest.mark.parametrize("limit", [None, 7])
def test_a_chunk_returned_in_several_parts_resolves_as_one(tmp_path, limit):
    path = write_jsonl(tmp_path / "s.jsonl", messy_rows())
    fs = fsspec.filesystem("file")
    chunks = cut(fs, "jsonl", [str(path)], chunk_bytes=5_000)
    whole, split = plan_of(chunks, fs, shuffle=1, limit=limit), plan_of(chunks, fs, shuffle=2, limit=limit, parts=3)
    assert split.report == whole.report and split.offsets == whole.offsets
    assert split.seed_map.to_pylist() == whole.seed_map.to_pylist() and split.seed_map.num_rows >= 7
    assert split.seeds.tolist() == whole.seeds.tolist() and split.duplicates.tolist() == whole.duplicates.tolist()
    assert split.staged.to_pylist() == whole.staged.to_pylist() and split.drop.tolist() == whole.drop.tolist()


def test_the_limit_takes_the_first_synthesis_seeds_in_source_order_after_duplicates(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", messy_rows())
    fs = fsspec.filesystem("file")
    chunks = cut(fs, "jsonl", [str(path)], chunk_bytes=900)
    plan = plan_of(chunks, fs, shuffle=3, limit=5)
    expected = select_synthesis_seeds(read_seeds(str(path)).seeds).slice(0, 5)
    assert plan.seed_map.to_pylist() == expected.select(["query_id", "seed_key"]).to_pylist()
    assert len(plan.seeds) == 5 and len(plan.staged) == 5
    # everything staged beyond the limit (and the duplicates' calls) is left out of the engine's input
    all_staged = select_synthesis_seeds(read_seeds(str(path)).seeds).num_rows
    assert len(plan.drop) == all_staged - 5 + 2


def test_calls_from_a_second_pass_over_the_chosen_seeds():
    rows = PlanRows(0)
    seeds = []
    for i in range(4):
        raw = promptriever_row(f"q{i}", n_inst_neg=3)
        from dualview_core.data.chunks import RawRow

        seed = validate(RawRow(i, raw), ValidationConfig())
        seeds.append(seed)
        rows.valid(i, seed, calls=3)  # first pass: nothing staged (the limit's plan-only pass)
    builder = PlanBuilder()
    builder.add(rows.table())
    plan = builder.resolve(limit=2)
    second = PlanRows(0)
    second.valid(0, seeds[0], staged=["a", "b"], recorded=["c"], calls=3)
    second.valid(1, seeds[1], staged=[], calls=3)  # all three cached
    plan = with_calls(plan, [second.table()])
    assert plan.staged.to_pylist() == ["a", "b"] and plan.recorded.to_pylist() == ["c"]
    assert (plan.pending, plan.cached) == (3, 3) and len(plan.drop) == 0
    assert plan.seeds.tolist() == [locator(0, 0), locator(0, 1)]


def test_chunked_reading_numbers_rows_as_the_sequential_reader(tmp_path):
    """JSONL cut at every byte boundary width, blank lines and a last line without a newline."""
    lines = [json.dumps({"i": i, "pad": "x" * (i * 7 % 50)}) for i in range(30)]
    text = "\n".join(lines[:10]) + "\n\n  \n" + "\n".join(lines[10:])  # no trailing newline
    path = tmp_path / "a.jsonl"
    path.write_text(text, encoding="utf-8")
    fs = fsspec.filesystem("file")
    for width in (1, 2, 17, 64, 1000, 10_000):
        got = []
        for chunk in cut(fs, "jsonl", [str(path)], chunk_bytes=width):
            got += [r.value["i"] for batch in read_chunk(fs, chunk, 4) for r in batch]
        assert got == list(range(30)), width
    assert [r.index for b in iter_raw(str(path), batch_rows=7) for r in b] == list(range(30))


def test_parquet_chunks_are_whole_row_groups(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", [promptriever_row(f"q{i}") for i in range(10)], row_group_size=3)
    fs = fsspec.filesystem("file")
    chunks = cut(fs, "parquet", [str(path)], chunk_rows=5)
    assert [(c.start, c.stop, c.rows) for c in chunks] == [(0, 2, 6), (2, 4, 4)]
    ids = [r.value["query_id"] for c in chunks for b in read_chunk(fs, c, 2) for r in b]
    assert ids == [f"q{i}" for i in range(10)]
    assert np.all(np.diff([locator(1, 0), locator(1, 5), locator(2, 0)]) > 0)
    assert pa.types.is_int64(pa.array([locator(2, 3)]).type)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "hf"])
def test_a_chunk_read_for_some_rows_gives_exactly_those_rows_as_numbered_in_a_whole_read(tmp_path, fmt):
    rows = messy_rows()
    if fmt == "jsonl":
        path, kind = write_jsonl(tmp_path / "s.jsonl", rows), "jsonl"
    else:
        table = pa.Table.from_pylist([r for r in rows if isinstance(r, dict)])
        if fmt == "parquet":
            path, kind = write_parquet(tmp_path / "s.parquet", table.to_pylist(), row_group_size=4), "parquet"
        else:
            path, kind = tmp_path / "s.arrow", "hf"
            with pa.ipc.new_stream(str(path), table.schema) as w:
                for batch in table.to_batches(max_chunksize=6):
                    w.write_batch(batch)
    fs = fsspec.filesystem("file")
    chunks = cut(fs, kind, [str(path)], chunk_bytes=3_000, chunk_rows=9)
    for c, chunk in enumerate(chunks):
        whole = [r for b in read_chunk(fs, chunk, 5) for r in b]
        for wanted in ([], [0], [r.index for r in whole][1::3], {len(whole) - 1, 0, 10_000}):
            got = [r for b in read_chunk(fs, chunk, 5, wanted) for r in b]
            assert got == [r for r in whole if r.index in set(wanted)], (c, wanted)
    assert any(r.problem for chunk in chunks for b in read_chunk(fs, chunk, 5, range(100)) for r in b) == (fmt == "jsonl")
