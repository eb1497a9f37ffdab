"""Engine input staged in the output's work folder (local or s3://): bounded Parquet files that one
pass writes and an engine then reads, wherever its workers run.

The first pass's tasks (tasks/synthesis/planning.py) each stage their chunk's calls, and the verification pass
stages its questions (tasks/synthesis/verification.py): files of about `STAGE_ROWS` rows, in row groups of one
engine batch, holding the rendered messages (or, for vLLM, their templated text: `prompt`), what a
record of each row needs, and where the row came from (`locator`, when it came from the seed source).
Then one engine reads every file (one engine start for the whole pass; a Ray Data engine reads a row
group per task, tasks/synthesis/staged_source.py).
`staged_info` reads a few rows back by cache key, for the rare row an engine never returned.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STAGE_ROWS = 4096  # rendered rows per staged file, about (a whole number of row groups)
MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
_TYPES = {"messages": MESSAGES, "target_index": pa.int32(), "locator": pa.int64()}  # every other column: a string


def staged_schema(columns: Sequence[str]) -> pa.Schema:
    """The staged files' schema: `columns` (an engine's input and what rides along with it)."""
    return pa.schema([(c, _TYPES.get(c, pa.string())) for c in columns])


class StagedFiles:
    """Rows added here go to `folder` as `<prefix>-<n>.parquet` (`paths`, in order), whole row groups
    of `group_rows` (the engine's batch), about `STAGE_ROWS` rows a file; only the last file's last
    group is shorter. Holds at most one file's rows; with `keep`, also the tables written since the
    caller last took them (`take`), for a caller that hands them on as well as staging them."""

    def __init__(self, fs: fsspec.AbstractFileSystem, folder: str, prefix: str, group_rows: int, schema: pa.Schema,
                 keep: bool = False):
        self.fs, self.folder, self.prefix, self.group_rows, self.schema = fs, folder, prefix, group_rows, schema
        self.keep, self.written = keep, []
        self.paths: list[str] = []
        self._buffer: list[dict] = []
        self.file_rows = max(group_rows, STAGE_ROWS // group_rows * group_rows)
        if "file" in fs.protocol:  # an object store has no folders (and s3fs would ask to create the bucket)
            fs.makedirs(folder, exist_ok=True)

    def add(self, rows: list[dict]) -> None:
        self._buffer += rows
        while len(self._buffer) >= self.file_rows:
            self._write(self._buffer[:self.file_rows])
            self._buffer = self._buffer[self.file_rows:]

    def close(self) -> tuple[str, ...]:
        """The files written, in order (the last one holds what is left)."""
        if self._buffer:
            self._write(self._buffer)
            self._buffer = []
        return tuple(self.paths)

    def take(self) -> list[pa.Table]:
        """The tables written since the last call (with `keep`)."""
        out, self.written = self.written, []
        return out

    def _write(self, rows: list[dict]) -> None:
        path = posixpath.join(self.folder, f"{self.prefix}-{len(self.paths):04d}.parquet")
        table = pa.Table.from_pylist(rows, schema=self.schema)
        with self.fs.open(path, "wb") as f:
            pq.write_table(table, f, row_group_size=self.group_rows)
        self.paths.append(path)
        if self.keep:
            self.written.append(table)


def staged_info(fs: fsspec.AbstractFileSystem, paths: Sequence[str], keys: Sequence[str], columns: Sequence[str]) -> list[dict]:
    """The staged rows of `keys` (`columns` of them), in the order of `keys`, read a file at a time."""
    wanted, found = set(keys), {}
    for path in paths:
        with fs.open(path, "rb") as f:
            table = pq.read_table(f, columns=list(columns))
        hits = table.filter(pc.is_in(table["cache_key"], value_set=pa.array(list(wanted), pa.string())))
        found |= {row["cache_key"]: row for row in hits.to_pylist()}
    return [found[k] for k in keys]
