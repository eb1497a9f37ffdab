"""A source cut into chunks that can be read independently (in parallel) and still numbered as one.

Owns how a source is divided and how one chunk's rows are read:
- Parquet: whole row groups, grouped up to about `CHUNK_ROWS` rows (a row group is never split);
- JSONL: byte ranges of about `CHUNK_BYTES`; a line belongs to the chunk holding its first byte;
- a `datasets` Arrow stream file: whole.
A chunk numbers its rows from 0 (blank JSONL lines are layout, not rows). A row's position in the
source is its chunk's offset plus its number there; offsets are the running sum of the chunks' row
counts in order. `sources.iter_raw` reads the chunks one after another, so a sequential reader and a
parallel one see the same rows at the same positions.

A row and its chunk travel together as one int64, the *locator* `chunk << 32 | row`:

    >>> locator(3, 7), split(locator(3, 7))
    (12884901895, (3, 7))

It does not know what a row should contain (see `seeds`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from dualview_core.contracts import Reason

CHUNK_BYTES = 64 << 20  # JSONL: ~9k realistic rows (7 KB each) a chunk
CHUNK_ROWS = 8192  # Parquet: row groups are gathered up to this many rows
GUESS_ROW_BYTES = 4 << 10  # JSONL: a small seed row, for sizes decided before a chunk is read
ROW_BITS = 32  # a chunk holds fewer than 2**32 rows


@dataclass(frozen=True, slots=True)
class RawRow:
    index: int  # 0-based position (in its chunk, or across the whole source: see the reader)
    value: Any  # the decoded row (a dict when well formed), or the raw text when `problem` is set
    problem: tuple[Reason, str] | None = None


@dataclass(frozen=True)
class Chunk:
    """One independently readable piece of a source file (`file`: the path within its filesystem)."""

    file: str
    kind: str  # "parquet" | "jsonl" | "hf"
    start: int = 0  # parquet: first row group; jsonl: first byte
    stop: int = 0  # parquet: one past the last row group; jsonl: one past the last byte
    rows: int | None = None  # known in advance for Parquet only

    @property
    def expected_rows(self) -> int | None:
        """Its rows if known (Parquet), else guessed from its bytes (JSONL, on the small side); None
        for a source whose size says nothing before it is read.

            >>> Chunk("a.jsonl", "jsonl", 0, 40 << 10).expected_rows, Chunk("a.parquet", "parquet", 0, 1, 500).expected_rows
            (10, 500)
        """
        if self.rows is not None:
            return self.rows
        return max(1, (self.stop - self.start) // GUESS_ROW_BYTES) if self.kind == "jsonl" else None


def locator(chunk: int, row: int) -> int:
    return chunk << ROW_BITS | row


def split(value):
    """(chunk, row) of a locator, or of a NumPy array of them."""
    return value >> ROW_BITS, value & ((1 << ROW_BITS) - 1)


def cut(fs: fsspec.AbstractFileSystem, kind: str, files: list[str], chunk_bytes: int = CHUNK_BYTES,
        chunk_rows: int = CHUNK_ROWS) -> list[Chunk]:
    """The chunks of `files` (all of one `kind`), in source order. Reads Parquet footers and file
    sizes, never rows."""
    out: list[Chunk] = []
    for file in files:
        if kind == "parquet":
            with fs.open(file, "rb") as f:
                meta = pq.ParquetFile(f).metadata
            out += _row_group_chunks(file, [meta.row_group(g).num_rows for g in range(meta.num_row_groups)], chunk_rows)
        elif kind == "jsonl":
            size = fs.size(file)
            out += [Chunk(file, kind, b, min(b + chunk_bytes, size)) for b in range(0, size, chunk_bytes)] or [Chunk(file, kind)]
        else:
            out.append(Chunk(file, kind))
    return out


def _row_group_chunks(file: str, group_rows: list[int], chunk_rows: int) -> list[Chunk]:
    """Consecutive row groups gathered until a chunk holds at least `chunk_rows` rows.

        >>> [(c.start, c.stop, c.rows) for c in _row_group_chunks("f", [5, 5, 20, 1], 8)]
        [(0, 2, 10), (2, 3, 20), (3, 4, 1)]
    """
    chunks, first, rows = [], 0, 0
    for g, n in enumerate(group_rows):
        rows += n
        if rows >= chunk_rows:
            chunks.append(Chunk(file, "parquet", first, g + 1, rows))
            first, rows = g + 1, 0
    if first < len(group_rows):
        chunks.append(Chunk(file, "parquet", first, len(group_rows), rows))
    return chunks


def read_chunk(fs: fsspec.AbstractFileSystem, chunk: Chunk, batch_rows: int,
               wanted: Collection[int] | None = None) -> Iterator[list[RawRow]]:
    """The chunk's rows in batches of at most `batch_rows`, numbered from 0 within the chunk; with
    `wanted` (row numbers), those rows only, the others skipped before they become Python objects
    (a pass over a few chosen rows does not decode every row of the chunk). A batch may then be
    empty."""
    reader = {"parquet": _parquet, "jsonl": _jsonl, "hf": _arrow_stream}[chunk.kind]
    picked = None if wanted is None else np.unique(np.fromiter(wanted, dtype=np.int64, count=len(wanted)))
    index = 0
    for values in reader(fs, chunk, batch_rows):
        n = len(values)
        rows = range(n) if picked is None else \
            (picked[np.searchsorted(picked, index):np.searchsorted(picked, index + n)] - index).tolist()
        if isinstance(values, pa.RecordBatch):
            values = (values if picked is None else values.take(pa.array(rows, pa.int64()))).to_pylist()
        else:
            values = [_decode_line(values[i]) for i in rows]
        batch = [RawRow(index + i, v.value, v.problem) if isinstance(v, RawRow) else RawRow(index + i, v)
                 for i, v in zip(rows, values)]
        index += n
        yield batch


def _parquet(fs, chunk: Chunk, batch_rows: int) -> Iterator[pa.RecordBatch]:
    with fs.open(chunk.file, "rb") as f:
        yield from pq.ParquetFile(f).iter_batches(batch_size=batch_rows, row_groups=range(chunk.start, chunk.stop))


def _arrow_stream(fs, chunk: Chunk, batch_rows: int) -> Iterator[pa.RecordBatch]:
    with fs.open(chunk.file, "rb") as f:
        for rb in ipc.open_stream(f):
            for start in range(0, rb.num_rows, batch_rows):
                yield rb.slice(start, batch_rows)


def _jsonl(fs, chunk: Chunk, batch_rows: int) -> Iterator[list[bytes]]:
    """The chunk's non-blank lines, undecoded (`read_chunk` decodes the ones it keeps)."""
    batch: list = []
    with fs.open(chunk.file, "rb") as f:
        at = 0
        if chunk.start > 0:
            f.seek(chunk.start - 1)
            at = chunk.start - 1 + len(f.readline())  # the end of the line under way at `start`: its chunk's
        while at < chunk.stop:
            line = f.readline()
            if not line:
                break
            at += len(line)
            if not line.strip():
                continue  # blank lines are layout, not rows
            batch.append(line)
            if len(batch) >= batch_rows:
                yield batch
                batch = []
    if batch:
        yield batch


def _decode_line(line: bytes) -> Any:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raw = line.decode("utf-8", errors="backslashreplace").rstrip("\n")
        return RawRow(-1, raw, (Reason.UNDECODABLE, f"not UTF-8 at byte {exc.start}"))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return RawRow(-1, text.rstrip("\n"), (Reason.MALFORMED, f"invalid JSON: {exc.msg} at column {exc.colno}"))
