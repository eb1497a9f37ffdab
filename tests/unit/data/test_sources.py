"""Sources: every supported layout yields the same rows; unusable sources fail with one clear error."""

from __future__ import annotations

import datasets
import pytest

from dualview_core.data.loading import read_seeds
from dualview_core.data.sources import SourceError, iter_raw
from tests.helpers.factories import write_jsonl, write_parquet


def seeds_of(path) -> list[dict]:
    return read_seeds(str(path)).seeds.to_pylist()


def test_parquet_jsonl_folder_and_saved_datasets_agree(tmp_path, rows):
    jsonl = seeds_of(write_jsonl(tmp_path / "s.jsonl", rows))
    parquet = seeds_of(write_parquet(tmp_path / "s.parquet", rows))
    folder = tmp_path / "shards"
    folder.mkdir()
    write_parquet(folder / "part-0.parquet", rows[:4])
    write_parquet(folder / "part-1.parquet", rows[4:])
    sharded = seeds_of(folder)
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(saved))
    hf = seeds_of(saved)
    saved_dict = tmp_path / "saved_dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(saved_dict))
    hf_dict = seeds_of(saved_dict)
    assert len(jsonl) == len(rows)
    assert jsonl == parquet == sharded == hf == hf_dict


def test_row_indices_run_across_files_and_batches(tmp_path, rows):
    folder = tmp_path / "shards"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", rows[:4])
    write_jsonl(folder / "b.jsonl", rows[4:])
    batches = list(iter_raw(str(folder), batch_rows=3))
    assert [len(b) for b in batches] == [3, 1, 2]
    assert [r.index for b in batches for r in b] == list(range(6))


def test_blank_lines_are_not_rows(tmp_path, rows):
    path = write_jsonl(tmp_path / "s.jsonl", [rows[0], "", "   ", rows[1]])
    assert read_seeds(str(path)).report.rows == 2


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing.jsonl", "no such file or folder"),
        (lambda p: (p / "seeds.csv").write_text("a,b\n") and p / "seeds.csv", "unsupported format"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no Parquet or JSONL files"),
        (lambda p: (p / "broken.parquet").write_bytes(b"PAR1 not really") and p / "broken.parquet", "unreadable"),
    ],
)
def test_unusable_sources_raise_one_clear_error(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(SourceError, match=message) as info:
        read_seeds(str(path))
    assert str(path) in str(info.value)


def test_mixed_folder_is_refused(tmp_path, rows):
    write_jsonl(tmp_path / "a.jsonl", rows)
    write_parquet(tmp_path / "b.parquet", rows)
    with pytest.raises(SourceError, match="mixed Parquet and JSONL"):
        read_seeds(str(tmp_path))


def test_dataset_dict_with_several_splits_and_no_train_is_refused(tmp_path, rows):
    d = datasets.DatasetDict({"a": datasets.Dataset.from_list(rows), "b": datasets.Dataset.from_list(rows)})
    d.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(SourceError, match="point at one split"):
        read_seeds(str(tmp_path / "dd"))
