"""Staged engine input comes in bounded files of whole engine batches, and a few rows come back by key."""

from __future__ import annotations

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.synthesis.judging import INFO, TARGET
from tasks.synthesis.staging import STAGE_ROWS, StagedFiles, staged_info, staged_schema

COLUMNS = ["messages", *INFO, *TARGET]


def info(i: int) -> dict:
    return {"cache_key": f"k{i:03d}", "seed_key": f"s{i}", "target_index": i % 3, "query_id": f"q{i}",
            "query": f"query {i}", "instruction": f"instruction {i}", "target_title": f"t{i}", "target_text": f"text {i}",
            "messages": [{"role": "user", "content": f"m{i}"}]}


def test_staged_files_are_bounded_in_row_groups_of_one_engine_batch_and_keep_every_row_in_order(tmp_path):
    fs = fsspec.filesystem("file")
    files = StagedFiles(fs, str(tmp_path), "part", group_rows=100, schema=staged_schema(COLUMNS))
    rows = [info(i) for i in range(2 * STAGE_ROWS + 5)]
    for start in range(0, len(rows), 1000):  # added in batches that line up with neither files nor groups
        files.add(rows[start:start + 1000])
    paths = files.close()
    file_rows = STAGE_ROWS // 100 * 100
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == [file_rows, file_rows, len(rows) - 2 * file_rows]
    groups = [pq.ParquetFile(p).metadata.row_group(g).num_rows for p in paths for g in range(pq.ParquetFile(p).num_row_groups)]
    assert set(groups[:-1]) == {100} and groups[-1] == (len(rows) - 2 * file_rows) % 100
    table = pa.concat_tables([pq.read_table(p) for p in paths])
    assert table.to_pylist() == [{c: r[c] for c in table.column_names} for r in rows]
    assert table.schema.field("target_index").type == pa.int32()
    assert StagedFiles(fs, str(tmp_path), "big", group_rows=5000, schema=staged_schema(COLUMNS)).file_rows == 5000


def test_rows_come_back_by_key_in_the_order_asked(tmp_path):
    fs = fsspec.filesystem("file")
    files = StagedFiles(fs, str(tmp_path), "part", group_rows=4, schema=staged_schema(COLUMNS))
    files.add([info(i) for i in range(10)])
    paths = files.close()
    got = staged_info(fs, paths, ["k007", "k001", "k009"], list(INFO))
    assert got == [{c: info(i)[c] for c in INFO} for i in (7, 1, 9)]


def test_kept_files_are_handed_on_once_each_as_they_are_written(tmp_path):
    fs = fsspec.filesystem("file")
    files = StagedFiles(fs, str(tmp_path), "part", group_rows=100, schema=staged_schema(COLUMNS), keep=True)
    rows = [info(i) for i in range(files.file_rows + 7)]
    files.add(rows[:files.file_rows - 1])
    assert files.take() == []  # nothing written yet: the rows wait in the buffer
    files.add(rows[files.file_rows - 1:])
    first = files.take()
    assert [t.num_rows for t in first] == [files.file_rows] and files.take() == []
    files.close()
    taken = pa.concat_tables([*first, *files.take()])
    assert taken.to_pylist() == pa.concat_tables([pq.read_table(p) for p in files.paths]).to_pylist()
    assert taken["cache_key"].to_pylist() == [r["cache_key"] for r in rows]
    assert StagedFiles(fs, str(tmp_path), "plain", group_rows=4, schema=staged_schema(COLUMNS)).take() == []
