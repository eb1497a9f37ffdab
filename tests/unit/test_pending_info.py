"""The pending rows' info is read back from the staged files by key, in any order, without holding it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.synthesis import INFO, TARGET, _PendingInfo


def info(i: int) -> dict:
    return {"cache_key": f"k{i:03d}", "seed_key": f"s{i}", "target_index": i % 3, "query_id": f"q{i}",
            "query": f"query {i}", "instruction": f"instruction {i}", "target_title": f"t{i}", "target_text": f"text {i}"}


@pytest.fixture
def staged(tmp_path) -> list[str]:
    paths = []
    for f, rows in enumerate([range(5), range(5, 7), range(7, 12)]):
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(pa.Table.from_pylist([{**info(i), "messages": [{"role": "user", "content": "x"}]} for i in rows]), path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("geometry", [False, True])
def test_info_comes_back_by_key_from_files_and_held_rows(staged, geometry):
    pending = _PendingInfo(staged, [info(12), info(13)], geometry)
    columns = list(INFO + TARGET) if geometry else list(INFO)
    order = [11, 0, 12, 6, 3]  # across files, and a row held in memory
    assert pending.take([f"k{i:03d}" for i in order]) == [{c: info(i)[c] for c in columns} for i in order]
    assert pending.unanswered() == [f"k{i:03d}" for i in range(14) if i not in order]
    with pytest.raises(RuntimeError, match="not sent: nope"):
        pending.take(["nope"])


def test_nothing_pending_is_nothing_unanswered():
    pending = _PendingInfo([], [], geometry=False)
    assert pending.unanswered() == [] and pending.take([]) == []
