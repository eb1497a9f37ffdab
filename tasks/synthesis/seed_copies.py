"""Copies of the seeds a first-pass chunk asked about, in OUT/.work/seeds/, for the derive pass.

A run that changed few seeds derives only those (tasks/synthesis/patching.py). Read back from the
source, they would cost a read of every chunk holding one, and with the changes spread evenly that
is the whole source again. So each chunk task of the first pass keeps the validated seeds whose calls
it staged or recorded, up to `COPY_ROWS` of them, and writes them as one Parquet file; a derive task
reads a chunk's seeds from that file when it holds every seed the task wants of that chunk, and from
the source otherwise (a first run, where a chunk asks about more seeds than it keeps copies of, or a
seed derived again without being asked, its answer cached by an older run).

A task holds at most `COPY_ROWS` seeds; the driver holds none.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.contracts import SEED_ROW
from dualview_core.data.chunks import RawRow
from dualview_core.storage.tables import TableWriter, read_parquet
from tasks.synthesis.record_store import WORK, RecordStore

SEEDS = "seeds"  # OUT/.work/seeds/: a file per chunk that kept its copies
COPY_ROWS = 1024  # a chunk asking about more seeds than this (a first run) keeps none
ROW = "row"  # the seed's row number in its chunk
COPY_SCHEMA = SEED_ROW.append(pa.field(ROW, pa.int64(), nullable=False))


def _name(c: int) -> str:
    return f"{c:06d}.parquet"


class SeedCopies:
    """The seeds one chunk task asked about, kept until it is done, or dropped once there are too many."""

    def __init__(self, limit: int = COPY_ROWS):
        self.limit, self.rows, self.full = limit, [], False

    def add(self, row: int, seed: dict) -> None:
        if self.full:
            return
        if len(self.rows) >= self.limit:
            self.full, self.rows = True, []
            return
        self.rows.append({**seed, ROW: row})

    def write(self, store: RecordStore, c: int) -> bool:
        """Write chunk `c`'s copies, if it kept any; whether it did."""
        if self.full or not self.rows:
            return False
        with TableWriter(store.path(f"{WORK}/{SEEDS}/{_name(c)}"), COPY_SCHEMA, store.options) as out:
            out.write(pa.Table.from_pylist(self.rows, schema=COPY_SCHEMA))
        return True


def copied(store: RecordStore, c: int, wanted: Collection[int] | None, batch_rows: int) -> Iterator[list[tuple[RawRow, dict]]] | None:
    """Chunk `c`'s `wanted` seeds from its copies, a batch at a time and in row order, as the
    (raw row, seed) pairs `planning.validated` yields; None when the copies do not hold them all."""
    if not wanted:
        return None
    path = posixpath.join(store.work(SEEDS), _name(c))
    store.fs.invalidate_cache(store.work(SEEDS))  # written by another task since this process last looked
    try:
        with store.fs.open(path, "rb") as f:
            table = read_parquet(f, path)  # at most COPY_ROWS seeds: read whole, once
    except FileNotFoundError:
        return None
    picked = np.fromiter(wanted, dtype=np.int64, count=len(wanted))
    if not np.isin(picked, table[ROW].to_numpy()).all():
        return None
    table = table.filter(pc.is_in(table[ROW], value_set=pa.array(picked)))
    table = table.take(pc.sort_indices(table[ROW]))
    return _batches(table, batch_rows)


def _batches(table: pa.Table, batch_rows: int) -> Iterator[list[tuple[RawRow, dict]]]:
    for start in range(0, table.num_rows, batch_rows):
        rows = table.slice(start, batch_rows).to_pylist()
        yield [(RawRow(seed.pop(ROW), None), seed) for seed in rows]
