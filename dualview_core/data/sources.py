"""Reading raw rows from a local path or `s3://` URL, in Parquet, JSONL or `datasets.save_to_disk` form.

This module owns *where bytes come from and how they become Python rows*, streamed in bounded
batches. It does not know what a row should contain: a line that is not UTF-8 or not JSON comes
out as a `RawRow` carrying its problem, and the caller quarantines it. Nothing is dropped here.

Supported sources:
- `x.parquet`, `x.jsonl` / `x.json` (one JSON object per line);
- a folder of such files (read in name order; names starting with `_` or `.` are metadata, skipped);
- a `datasets.save_to_disk` folder (`state.json` + Arrow stream files), or a DatasetDict folder
  (`dataset_dict.json`; its `train` split, or its only split).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Collection, Iterator

import fsspec
import pyarrow as pa

from dualview_core.data.chunks import Chunk, RawRow, cut, read_chunk
from dualview_core.storage.filesystems import SourceError, filesystem, unreachable

PARQUET = (".parquet", ".pq")
JSONL = (".jsonl", ".json", ".ndjson")


def _files(fs: fsspec.AbstractFileSystem, path: str, label: str) -> tuple[str, list[str]]:
    """(kind, files) where kind is 'parquet', 'jsonl' or 'hf'. `label` is the path as the user wrote it."""
    try:
        exists = fs.exists(path)
        is_dir = exists and fs.isdir(path)
    except (OSError, PermissionError) as exc:
        raise SourceError(f"{label}: {unreachable(exc) or f'unreadable ({exc})'}") from exc
    if not exists:
        raise SourceError(f"{label}: no such file or folder")
    if not is_dir:
        return _kind_of(path), [path]
    names = sorted(fs.ls(path, detail=False))
    base = {posixpath.basename(n) for n in names}
    if "dataset_dict.json" in base:
        return _files(fs, _pick_split(fs, path, label), label)
    if "state.json" in base:
        state = json.loads(fs.cat_file(posixpath.join(path, "state.json")))
        return "hf", [posixpath.join(path, f["filename"]) for f in state["_data_files"]]
    # names starting with _ or . are metadata (a download's _manifest.json, _SUCCESS, .crc), as
    # pyarrow's dataset discovery treats them
    data = [n for n in names if n.endswith(PARQUET + JSONL) and not posixpath.basename(n).startswith(("_", "."))]
    kinds = {_kind_of(n) for n in data}
    if len(kinds) != 1:
        found = "no Parquet or JSONL files" if not kinds else "mixed Parquet and JSONL files"
        raise SourceError(f"{label}: unsupported folder ({found})")
    return kinds.pop(), data


def _pick_split(fs: fsspec.AbstractFileSystem, path: str, label: str) -> str:
    splits = json.loads(fs.cat_file(posixpath.join(path, "dataset_dict.json")))["splits"]
    if "train" in splits:
        return posixpath.join(path, "train")
    if len(splits) == 1:
        return posixpath.join(path, splits[0])
    raise SourceError(f"{label}: DatasetDict with splits {splits}; point at one split's folder")


def _kind_of(path: str) -> str:
    if path.endswith(PARQUET):
        return "parquet"
    if path.endswith(JSONL):
        return "jsonl"
    raise SourceError(f"{path}: unsupported format (expected .parquet, .jsonl or a dataset folder)")


def chunks(path: str, storage_options: dict | None = None, **sizes) -> tuple[fsspec.AbstractFileSystem, list[Chunk]]:
    """The source's filesystem and its chunks in order (`dualview_core.data.chunks`): what parallel readers share out."""
    fs, inner = filesystem(path, storage_options)
    kind, files = _files(fs, inner, path)
    try:
        return fs, cut(fs, kind, files, **sizes)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"{path}: {unreachable(exc) or f'unreadable ({exc})'}") from exc


def read_rows(fs: fsspec.AbstractFileSystem, chunk: Chunk, batch_rows: int,
              wanted: Collection[int] | None = None) -> Iterator[list[RawRow]]:
    """One chunk's rows (numbered within it; its `wanted` ones only, when given), with unreadable
    bytes reported as a SourceError."""
    try:
        yield from read_chunk(fs, chunk, batch_rows, wanted)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"{chunk.file}: {unreachable(exc) or f'unreadable ({exc})'}") from exc


def iter_raw(path: str, storage_options: dict | None = None, batch_rows: int = 8192) -> Iterator[list[RawRow]]:
    """Yield the source's rows in batches of at most `batch_rows`, numbered across files: its chunks
    read one after another, so the positions are those a parallel reader of the chunks computes."""
    fs, pieces = chunks(path, storage_options)
    offset = 0
    for chunk in pieces:
        rows = 0
        for batch in read_rows(fs, chunk, batch_rows):
            rows += len(batch)
            yield [RawRow(offset + r.index, r.value, r.problem) for r in batch]
        offset += rows


def source_fingerprint(path: str, storage_options: dict | None = None) -> str:
    """A cheap identity of a source's current bytes: names, sizes and versions (ETag or mtime) of its
    files, hashed. Any rewrite of a file changes it; reading the rows is not needed."""
    from dualview_core.keys import canonical_json, digest

    fs, inner = filesystem(path, storage_options)
    _, files = _files(fs, inner, path)
    entries = []
    for file in files:
        info = fs.info(file)
        version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified")
        entries.append([posixpath.relpath(file, inner) if file != inner else "", info.get("size"), str(version)])
    return digest(canonical_json(entries))
