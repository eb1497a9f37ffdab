"""Staged engine input comes in bounded files, and each pending row's info is read back from them by key, in
any order, without holding it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.staging import STAGE_ROWS, PendingInfo, StagedFiles
from tasks.judging import INFO, TARGET


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
    columns = list(INFO + TARGET) if geometry else list(INFO)
    pending = PendingInfo(staged, [info(12), info(13)], columns)
    order = [11, 0, 12, 6, 3]  # across files, and a row held in memory
    assert pending.take([f"k{i:03d}" for i in order]) == [{c: info(i)[c] for c in columns} for i in order]
    assert pending.unanswered() == [f"k{i:03d}" for i in range(14) if i not in order]
    with pytest.raises(RuntimeError, match="not sent: nope"):
        pending.take(["nope"])


def test_nothing_pending_is_nothing_unanswered():
    pending = PendingInfo([], [], list(INFO))
    assert pending.unanswered() == [] and pending.take([]) == []


def test_staged_files_are_bounded_in_row_groups_of_one_engine_batch_and_keep_every_row_in_order(tmp_path):
    files = StagedFiles(str(tmp_path), group_rows=100)
    rows = [info(i) for i in range(2 * STAGE_ROWS + 5)]
    for start in range(0, len(rows), 1000):  # added in batches that line up with neither files nor groups
        files.add(rows[start:start + 1000])
    paths = files.close()
    file_rows = STAGE_ROWS // 100 * 100
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == [file_rows, file_rows, len(rows) - 2 * file_rows]
    groups = [pq.ParquetFile(p).metadata.row_group(g).num_rows for p in paths for g in range(pq.ParquetFile(p).num_row_groups)]
    assert set(groups[:-1]) == {100} and groups[-1] == (len(rows) - 2 * file_rows) % 100
    assert pa.concat_tables([pq.read_table(p) for p in paths]).to_pylist() == rows
    assert StagedFiles(str(tmp_path), group_rows=5000).file_rows == 5000  # a batch larger than a file: a file a batch
