"""Engine input staged on local disk: bounded Parquet files a pass writes and an engine then reads.

A pass over the seeds renders the rows an engine still has to answer and stages them here, about
`STAGE_ROWS` rows a file in row groups of one engine batch, together with what a record of each row
needs. Then one engine reads every file (one engine start for the whole pass; a Ray Data engine
reads a row group per task, tasks/staged_source.py, and carries that info through to the stage
after it). `PendingInfo` notes which rows came back, and gives a row's info back by cache key where
this process needs it, reading the files rather than holding the rows.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dualview_core.cache_index import KeyIndex

STAGE_ROWS = 4096  # rendered rows per staged engine-input file, about (a whole number of row groups)


class StagedFiles:
    """Rows added here go to `folder` (`paths`, in order) in files of a whole number of row groups
    of `group_rows` (the engine's batch), about `STAGE_ROWS` rows a file; only the last file's last
    group is shorter."""

    def __init__(self, folder: str, group_rows: int):
        self.folder, self.group_rows, self.paths, self._buffer = folder, group_rows, [], []
        self.file_rows = max(group_rows, STAGE_ROWS // group_rows * group_rows)

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

    def _write(self, rows: list[dict]) -> None:
        path = os.path.join(self.folder, f"part-{len(self.paths):06d}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=self.group_rows)
        self.paths.append(path)


class PendingInfo:
    """`columns` of each staged row, by cache key. Only a sorted index of the keys is held (~40 bytes
    a row); the rows are read back from the staged files as answers arrive, a file at a time
    (answers come back roughly in file order), and from memory for the few `held` rows that were
    never staged (rejected before the engine)."""

    def __init__(self, paths: list[str] | tuple[str, ...], held: list[dict], columns: list[str]):
        self.tables = [*paths, pa.Table.from_pylist(held)] if held else list(paths)
        self.columns = columns
        keys = [self._table(i, ["cache_key"])["cache_key"].to_numpy(zero_copy_only=False).astype("S")
                for i in range(len(self.tables))]
        sizes = np.array([len(k) for k in keys], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        flat = np.concatenate(keys) if keys else np.array([], dtype="S1")
        self.index = KeyIndex(flat, np.arange(len(flat), dtype=np.int64))
        self.answered = np.zeros(len(flat), dtype=bool)
        self._loaded: tuple[int, pa.Table] | None = None

    def _table(self, i: int, columns: list[str]) -> pa.Table:
        source = self.tables[i]
        return source.select(columns) if isinstance(source, pa.Table) else pq.read_table(source, columns=columns)

    def _rows(self, i: int) -> pa.Table:
        if self._loaded is None or self._loaded[0] != i:
            self._loaded = (i, self._table(i, self.columns))
        return self._loaded[1]

    def mark(self, keys: list[str]) -> np.ndarray:
        """Note `keys` as answered; returns where their rows are."""
        at = self.index.lookup(keys)
        if (at < 0).any():
            raise RuntimeError(f"the engine answered a row that was not sent: {keys[int(np.argmax(at < 0))]}")
        self.answered[at] = True
        return at

    def take(self, keys: list[str]) -> list[dict]:
        """The rows of `keys` (noted as answered)."""
        at = self.mark(keys)
        files = np.searchsorted(self.starts, at, side="right") - 1
        out: list[dict | None] = [None] * len(keys)
        for i in np.unique(files):  # the file the last batch came from is usually the one loaded
            where = np.flatnonzero(files == i)
            for j, row in zip(where, self._rows(int(i)).take(pa.array(at[where] - self.starts[i])).to_pylist()):
                out[j] = row
        return out

    def unanswered(self) -> list[str]:
        missing = np.flatnonzero(~self.answered)
        files = np.searchsorted(self.starts, missing, side="right") - 1
        return [k for i in np.unique(files) for k in
                self._table(int(i), ["cache_key"])["cache_key"].take(pa.array(missing[files == i] - self.starts[i])).to_pylist()]
