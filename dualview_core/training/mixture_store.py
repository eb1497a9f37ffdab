"""Mixtures on disk: a mixture built once into a folder of Arrow IPC files, read memory-mapped.

Owns the on-disk form of a mixture and how it is built and read. Building streams the validated
seed batches and dual views into `seeds.arrow` and `views.arrow` (their own schemas, SEED_ROW and
DUAL_VIEW_ROW), keeping in memory only a `RowRef` and a negatives count per row; `mixtures.select`
then chooses from the refs exactly as `build_mixture` chooses in memory, and the choice is written
as `mixture.arrow` (one row per training row, in mixture order: where its stored row is, and the
instruction a corrupted dual view takes). `meta.json` holds name, digest and composition.

    folder/seeds.arrow   SEED_ROW, valid seed rows in source order           (at 0 .. S-1)
    folder/views.arrow   DUAL_VIEW_ROW, dual views in the order given        (at S .. S+V-1)
    folder/mixture.arrow at, corrupted instruction (null if not), available negatives
    folder/heldout.arrow at of the held-out dual views
    folder/meta.json     {"name", "digest", "composition", "rows", "format"}

Bounds: building holds one input batch and the refs (~300 bytes a row: ~0.3 GB at 1M rows); an open
store holds the small `mixture.arrow` columns and maps the rest, so a rank's reads are only the rows
of its batches (`StoredRows.take`). It does not know where folders live or when one is reused
(`tasks.training.worker` keys them by digest), nor about encoders or training.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from dualview_core.config import MixtureConfig
from dualview_core.contracts import DUAL_VIEW_ROW, SEED_ROW
from dualview_core.method.mixtures import RowRef, Selection, select
from dualview_core.method.training_rows import Source, TrainingRow, corrupt, from_dual_view, from_seed

FORMAT = "dualview-mixture/2"
SEEDS, VIEWS, MIXTURE, HELDOUT, META = "seeds.arrow", "views.arrow", "mixture.arrow", "heldout.arrow", "meta.json"
MIXTURE_SCHEMA = pa.schema([pa.field("at", pa.int64(), nullable=False),
                            pa.field("corrupted_instruction", pa.string()),
                            pa.field("available", pa.int32(), nullable=False)])


def _doc_ids(column: pa.ChunkedArray | pa.Array) -> list[list[str]]:
    """The doc_ids of a list<PASSAGE> column, without turning titles and texts into Python."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    # per chunk, from its offsets and its (unsliced) child: combining chunks would copy every text
    return [ids for c in chunks for ids in pa.ListArray.from_arrays(c.offsets, c.values.field("doc_id")).to_pylist()]


def _distinct_except(first: str, *lists: list[str]) -> int:
    """`negatives.available` on doc_ids: distinct ids over the lists, the positive's excluded."""
    return len(set().union(*lists) - {first})


def seed_refs(batch: pa.Table, start: int) -> Iterator[tuple[RowRef, int]]:
    """(ref, available negatives) of each SEED_ROW of a batch; `at` counts on from `start`."""
    columns = [batch.column(n).to_pylist() for n in ("seed_key", "query_id", "has_instruction")]
    positives, negatives, forced = (_doc_ids(batch.column(n)) for n in ("positives", "negatives", "instruction_negatives"))
    for i, (key, query_id, has_instruction) in enumerate(zip(*columns)):
        if not positives[i]:
            raise ValueError(f"seed {key} has no positive")
        source = Source.INSTRUCT if has_instruction else Source.NON_INSTRUCT
        yield RowRef(key, source, query_id, key, start + i), _distinct_except(positives[i][0], forced[i], negatives[i])


def view_refs(batch: pa.Table, start: int) -> Iterator[tuple[RowRef, int]]:
    """(ref, available negatives) of each DUAL_VIEW_ROW of a batch (see `training_rows.from_dual_view`)."""
    names = ("dual_view_key", "query_id", "seed_key", "instruction")
    positive = pa.chunked_array([c.field("doc_id") for c in batch.column("positive").chunks], pa.string()).to_pylist()
    forced, negatives = (_doc_ids(batch.column(n)) for n in ("instruction_negatives", "negatives"))
    for i, (key, query_id, seed_key, instruction) in enumerate(zip(*(batch.column(n).to_pylist() for n in names))):
        if not forced[i]:
            raise ValueError(f"dual view {key} has no instruction negatives; the old positive should lead them")
        yield (RowRef(key, Source.DUAL_VIEW, query_id, seed_key, start + i, instruction),
               _distinct_except(positive[i], forced[i], negatives[i]))


def _spool(path: Path, schema: pa.Schema, batches: Iterable[pa.Table], refs_of, start: int,
           refs: list[RowRef], available: list[int]) -> int:
    """Write batches to an Arrow IPC file, collecting refs and counts; returns rows written."""
    n = 0
    with pa.ipc.new_file(str(path), schema) as writer:
        for batch in batches:
            batch = batch.select(schema.names).cast(schema)
            for ref, count in refs_of(batch, start + n):
                refs.append(ref)
                available.append(count)
            writer.write_table(batch)
            n += batch.num_rows
    return n


def build_store(seeds: Iterable[pa.Table], dual_views: Iterable[pa.Table], cfg: MixtureConfig,
                folder: str | os.PathLike) -> Selection:
    """Build the mixture `cfg` asks for into `folder` (created; it should not hold a store yet).

    The same rows, order, composition and digest as `mixtures.build_mixture` on the same data.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    refs: list[RowRef] = []
    available: list[int] = []
    n_seeds = _spool(folder / SEEDS, SEED_ROW, seeds, seed_refs, 0, refs, available)
    _spool(folder / VIEWS, DUAL_VIEW_ROW, dual_views, view_refs, n_seeds, refs, available)
    chosen = select(refs[:n_seeds], refs[n_seeds:], cfg)
    del refs
    rows = pa.table({"at": [r.at for r in chosen.rows],
                     "corrupted_instruction": [r.instruction if r.corrupted else None for r in chosen.rows],
                     "available": [available[r.at] for r in chosen.rows]}, schema=MIXTURE_SCHEMA)
    with pa.ipc.new_file(str(folder / MIXTURE), MIXTURE_SCHEMA) as writer:
        writer.write_table(rows)
    heldout = pa.table({"at": pa.array([r.at for r in chosen.heldout], pa.int64())})
    with pa.ipc.new_file(str(folder / HELDOUT), heldout.schema) as writer:
        writer.write_table(heldout)
    meta = {"format": FORMAT, "name": cfg.name, "digest": chosen.digest, "composition": chosen.composition,
            "rows": len(chosen.rows)}
    (folder / META).write_text(json.dumps(meta, indent=1))
    return chosen


class _Mapped:
    """An Arrow IPC file, memory-mapped, read row by row across its record batches."""

    def __init__(self, path: Path):
        self.reader = pa.ipc.open_file(pa.memory_map(str(path)))
        self.starts = [0]
        for i in range(self.reader.num_record_batches):
            self.starts.append(self.starts[-1] + self.reader.get_batch(i).num_rows)

    def __len__(self) -> int:
        return self.starts[-1]

    def rows(self, indices: Sequence[int]) -> list[dict]:
        """The rows at `indices` (in that order) as dicts; only their pages are read."""
        pieces = []
        for i in indices:
            b = bisect.bisect_right(self.starts, i) - 1
            pieces.append(self.reader.get_batch(b).slice(i - self.starts[b], 1))
        return pa.Table.from_batches(pieces, self.reader.schema).to_pylist() if pieces else []


class StoredRows(Sequence):
    """A stored mixture's training rows, in mixture order, read on demand."""

    def __init__(self, folder: Path):
        self.seeds, self.views = _Mapped(folder / SEEDS), _Mapped(folder / VIEWS)
        index = pa.ipc.open_file(pa.memory_map(str(folder / MIXTURE))).read_all()
        self.at = index.column("at").to_numpy()
        self.corrupted = {i: s for i, s in enumerate(index.column("corrupted_instruction").to_pylist()) if s is not None}
        self.counts = index.column("available").to_numpy()

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(range(*i.indices(len(self))))
        return self.take([i])[0]

    def stored(self, ats: Sequence[int]) -> list[TrainingRow]:
        """Training rows of stored rows `ats` (seed or dual view, as stored: not corrupted)."""
        n = len(self.seeds)
        seeds = iter(from_seed(r) for r in self.seeds.rows([a for a in ats if a < n]))
        views = iter(from_dual_view(r) for r in self.views.rows([a - n for a in ats if a >= n]))
        return [next(seeds) if a < n else next(views) for a in ats]

    def take(self, indices: Sequence[int]) -> list[TrainingRow]:
        """Mixture rows `indices`, in that order: only those rows are read from disk."""
        rows = self.stored([int(self.at[i]) for i in indices])
        return [corrupt(row, self.corrupted[i]) if i in self.corrupted else row for i, row in zip(indices, rows)]

    def available_negatives(self) -> list[int]:
        """`negatives.available` of every row, computed when the store was built."""
        return self.counts.tolist()


class StoredHeldout(Sequence):
    """The held-out dual views, read on demand: at 10% of 500k dual views they would be ~2 GB of
    passages in memory, while the separation diagnostic needs only their query and instructions."""

    def __init__(self, rows: StoredRows, ats: list[int]):
        self.rows, self.ats = rows, ats

    def __len__(self) -> int:
        return len(self.ats)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.rows.stored(self.ats[i])
        return self.rows.stored([self.ats[i]])[0]


@dataclass(frozen=True)
class StoredMixture:
    """A mixture opened from its folder: `Mixture`'s fields, rows read on demand."""

    name: str
    rows: StoredRows
    heldout: StoredHeldout
    composition: dict
    digest: str
    folder: str


def open_store(folder: str | os.PathLike) -> StoredMixture:
    """Open a store `build_store` wrote; a folder without a complete store is a clear error."""
    folder = Path(folder)
    if not (folder / META).is_file():
        raise FileNotFoundError(f"{folder} holds no built mixture ({META} missing)")
    meta = json.loads((folder / META).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder}: mixture format {meta.get('format')!r}, expected {FORMAT!r}")
    rows = StoredRows(folder)
    held = pa.ipc.open_file(pa.memory_map(str(folder / HELDOUT))).read_all().column("at").to_pylist()
    return StoredMixture(meta["name"], rows, StoredHeldout(rows, held), meta["composition"], meta["digest"], str(folder))
