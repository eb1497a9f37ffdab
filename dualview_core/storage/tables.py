"""Writing and reading contract tables on a local path or `s3://`, always through a schema.

Owns file layout and atomicity of single files (write to a temporary name, then move), and reading
row groups ahead of a writer that copies them (`read_ahead`). It does not know what the tables mean.
"""

from __future__ import annotations

import posixpath
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from dualview_core.contracts import QUARANTINE, Rejected, conform
from dualview_core.storage.filesystems import SourceError, filesystem

T = TypeVar("T")
READ_AHEAD = 4  # row groups decoded ahead of the one being written


class TableWriter:
    """Streams tables of one schema into one Parquet file, published atomically on `close()`.

    Usage: `with TableWriter(path, SCHEMA) as w: w.write(table)`. An exception inside the block
    leaves no file behind (the temporary one is removed), so readers never see a partial file.
    """

    def __init__(self, path: str, schema: pa.Schema, storage_options: dict | None = None):
        self.fs, self.path = filesystem(path, storage_options)
        self.schema = schema
        parent = posixpath.dirname(self.path)
        self.tmp = posixpath.join(parent, f".{posixpath.basename(self.path)}.{uuid.uuid4().hex}.tmp")
        if parent:
            self.fs.makedirs(parent, exist_ok=True)
        self._file = self.fs.open(self.tmp, "wb")
        self._writer = pq.ParquetWriter(self._file, schema)
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        table = conform(table, self.schema, what=self.path)
        self._writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> None:
        self._writer.close()
        self._file.close()
        self.fs.mv(self.tmp, self.path)

    def abort(self) -> None:
        self._writer.close()
        self._file.close()
        self.fs.rm(self.tmp)

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.abort() if exc_type else self.close()


def write_table(path: str, table: pa.Table, schema: pa.Schema, storage_options: dict | None = None) -> int:
    with TableWriter(path, schema, storage_options) as w:
        w.write(table)
    return w.rows


def read_table(path: str, schema: pa.Schema, storage_options: dict | None = None) -> pa.Table:
    """Read a Parquet file written through a contract, and check it still matches."""
    fs, inner = filesystem(path, storage_options)
    with fs.open(inner, "rb") as f:
        table = read_parquet(f, path)
    return conform(table, schema, what=path)


def read_parquet(f, path: str, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file's table, or one line naming the file when it is cut short or not Parquet at all."""
    try:
        return pq.read_table(f, columns=columns)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceError(f"{path}: not a readable Parquet file ({first}); it is damaged or was never "
                          "finished") from None


def read_ahead(items: Iterable[T], depth: int = READ_AHEAD) -> Iterator[T]:
    """`items` in order, produced on a thread of their own up to `depth` ahead of the caller.

    Arrow decodes and encodes Parquet without the GIL, so a loop that reads row groups and writes
    them to another file keeps two cores busy when the reading runs here. Only one item is ever
    being produced at a time (one thread), so a generator over an open file stays safe. An
    exception raised while producing comes out where the caller takes that item; closing this
    iterator early waits for the item in production and closes `items`.

        >>> list(read_ahead(iter(range(5)), depth=2))
        [0, 1, 2, 3, 4]
    """
    source, end = iter(items), object()
    pool = ThreadPoolExecutor(1, thread_name_prefix="read-ahead")
    try:
        ahead = deque(pool.submit(next, source, end) for _ in range(max(1, depth)))
        while (item := ahead.popleft().result()) is not end:
            ahead.append(pool.submit(next, source, end))
            yield item
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        close = getattr(source, "close", None)
        if close is not None:
            close()


def quarantine_table(rejected: Iterable[Rejected], source: str) -> pa.Table:
    rows = [
        {"source": source, "row_index": r.row_index, "query_id": r.query_id, "reason": r.reason.value,
         "detail": r.detail, "raw": r.raw}
        for r in rejected
    ]
    return pa.Table.from_pylist(rows, schema=QUARANTINE)
