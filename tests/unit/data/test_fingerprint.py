"""Source fingerprints: stable while the bytes stay, different once any file is rewritten."""

from __future__ import annotations

import os

import pytest

from dualview_core.data.sources import SourceError, source_fingerprint
from tests.helpers.factories import write_jsonl


def test_fingerprint_changes_on_rewrite_and_not_on_reading(tmp_path, rows):
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    first = source_fingerprint(str(path))
    assert source_fingerprint(str(path)) == first
    write_jsonl(path, rows[:-1])
    assert source_fingerprint(str(path)) != first


def test_same_size_edit_is_seen_through_the_modification_time(tmp_path, rows):
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    first = source_fingerprint(str(path))
    text = path.read_text().replace("q0", "q9", 1)  # same length
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert source_fingerprint(str(path)) != first


def test_folders_cover_every_file(tmp_path, rows):
    write_jsonl(tmp_path / "a.jsonl", rows)
    first = source_fingerprint(str(tmp_path))
    write_jsonl(tmp_path / "b.jsonl", rows)
    assert source_fingerprint(str(tmp_path)) != first


def test_missing_source_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="no such file"):
        source_fingerprint(str(tmp_path / "nope.jsonl"))
