"""The pass after staging: staged rows through an engine, then judged and published as record shards
by the Ray Data workers that judge them.

`published(cfg, model_path, staged, judge, shelf)` reads the staged files a row group per task
(tasks/synthesis/staged_source.py; every node reads the output's storage), sends them through the configured
engine, and runs `Publish` after it: a Ray Data actor pool that judges `shelf.rows` result rows at a
time with `judge` (tasks/synthesis/judging.py's records, tasks/synthesis/verification.py's verdicts) and writes them as
one shard under OUT/<folder>/. What reaches the driver is the shard's summary only: per record its
key and cost columns, and the shard's name. Ray Data gathers blocks into batches of `shelf.rows`
and hands the rest of a bundle over as a short batch (a dropped duplicate makes a block short):
those few records come back whole and the driver publishes them in whole shards, so every shard
but the last has exactly `shelf.rows` rows. (A `repartition(target_num_rows_per_block=…)` before the
stage would do the same, but its tasks take a whole CPU: with the engine's actors holding the rest of
a node, they are never scheduled and the run waits forever.) An engine that answers in this process
(the reference engine) goes through the same `Publish`, called here.

A shard's name comes from its run and keys (RecordStore.write_shard): a task Ray runs again after a
node died rewrites its shard rather than adding one. The driver holds one summary at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dualview_core.synthesis.cache_index import fixed_width
from dualview_core.config import SynthesisConfig
from dualview_core.contracts import SYNTHESIS_RECORD
from tasks.synthesis.engines import HELPER_CPUS, RayDataEngine, make_engine, result_row
from tasks.synthesis.judging import engine_input
from tasks.synthesis.record_store import RecordStore

COST_COLUMNS = ["cache_key", "rejection", "attempts", "prompt_tokens", "completion_tokens", "latency_s"]
TEXT_COLUMNS = ["raw_response", "instruction", "query", "original_instruction", "sampling_params"]  # not in summaries
PUBLISHERS = 4  # most actors of the stage after the engine (it starts with one)
PROGRESS_STEPS = 8  # a pass publishes at least this many shards when it can: progress a person sees move
MIN_SHARD_ROWS = 16  # ...but no smaller shards for it


@dataclass(frozen=True)
class StagedRows:
    """Engine input staged as Parquet files (`paths` in `fs`), less the rows whose `locator` is in `drop`."""

    fs: fsspec.AbstractFileSystem
    paths: tuple[str, ...]
    drop: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


@dataclass(frozen=True)
class Streamed:
    """Engine input as a Ray Data Dataset of its `columns`, produced while the engine works (the
    streaming first pass, tasks/synthesis/planning.py's `plan_stream`)."""

    dataset: Callable[[list[str]], object]


@dataclass(frozen=True)
class Shelf:
    """Where the stage after the engine publishes: `store`'s `folder`, shards of `rows` named for `run`."""

    store: RecordStore
    folder: str
    run: str
    rows: int


def shard_rows(cfg: SynthesisConfig, rows: int) -> int:
    """Rows per published shard for a pass of `rows` rows: `shard_rows`, but no more than an eighth
    of the pass (rounded up) when that is still `MIN_SHARD_ROWS` or more, so a small run's progress
    moves too.

        >>> cfg = SynthesisConfig(shard_rows=1000)
        >>> shard_rows(cfg, 1_000_000), shard_rows(cfg, 200), shard_rows(cfg, 66), shard_rows(cfg.model_copy(update={"shard_rows": 4}), 66)
        (1000, 25, 16, 4)
    """
    return min(cfg.shard_rows, max(MIN_SHARD_ROWS, -(-rows // PROGRESS_STEPS)))


class Publish:
    """Result rows (an engine's answers with their staged columns) -> records, published as one shard
    when they make a whole one; returns the summary (`_summary`). Ray Data hands it `shelf.rows` rows
    at a time, and the rest of a bundle as a short batch: those records come back whole (`shard`
    null), and `published` gathers them into whole shards."""

    def __init__(self, judge: type, args: tuple, shelf: Shelf):
        self.judge, self.shelf = judge(*args), shelf

    def __call__(self, batch: pa.Table) -> pa.Table:
        records = self.judge([{**row, **result_row(row)} for row in batch.to_pylist()])
        if records.num_rows < self.shelf.rows:
            return records.append_column("shard", pa.nulls(records.num_rows, pa.string()))
        return _summary(records, self.shelf.store.write_shard(records, self.shelf.folder, self.shelf.run))


def _summary(records: pa.Table, shard: str) -> pa.Table:
    """A published shard's records with their texts left out: the key and cost columns are what the
    driver reads."""
    for name in TEXT_COLUMNS:
        at = records.schema.get_field_index(name)
        records = records.set_column(at, name, pa.nulls(records.num_rows, records.schema.field(name).type))
    return records.append_column("shard", pa.array([shard] * records.num_rows, pa.string()))


def published(cfg: SynthesisConfig, model_path: str | None, staged: StagedRows | Streamed, columns: list[str], judge: type,
              args: tuple, shelf: Shelf, prompted: bool = False) -> Iterator[pa.Table]:
    """The summaries of the shards published as the engine answers the staged rows, or the rows a
    `Streamed` source gives as it makes them (see the module). `prompted`: the rows carry their
    templated `prompt` instead of their `messages` (tasks.synthesis.engines.templated)."""
    engine = make_engine(cfg, model_path, prompted)
    given = engine_input(prompted)
    carry = [c for c in columns if c not in ("cache_key", "messages", "prompt")]
    wanted = [*given, *(c for c in carry if c not in given)]
    if isinstance(engine, RayDataEngine):
        from ray.data import ActorPoolStrategy

        from tasks.synthesis.ray_runtime import ensure_ray
        from tasks.synthesis.staged_source import read_staged

        ensure_ray(cfg.ray_address)
        ds = engine.transform(staged.dataset(wanted) if isinstance(staged, Streamed) else read_staged(staged, wanted), carry)
        ds = ds.map_batches(Publish, fn_constructor_args=(judge, args, shelf), batch_size=shelf.rows, batch_format="pyarrow",
                            compute=ActorPoolStrategy(min_size=1, max_size=PUBLISHERS), num_cpus=HELPER_CPUS)
        summaries = as_made(ds)
    else:
        rows = _streamed_rows(staged, wanted) if isinstance(staged, Streamed) else staged_rows(staged, wanted)
        summaries = _here(engine, Publish(judge, args, shelf), rows, shelf.rows)
    rests = []  # records of short batches, published here in whole shards
    for summary in summaries:
        published = summary.filter(pc.is_valid(summary["shard"]))
        if published.num_rows:
            yield published
        rest = summary.filter(pc.is_null(summary["shard"])).drop_columns(["shard"]).cast(SYNTHESIS_RECORD)
        rests += [rest] if rest.num_rows else []
        while sum(t.num_rows for t in rests) >= shelf.rows:
            records = pa.concat_tables(rests)
            rests = [records.slice(shelf.rows)]
            yield _summary(records.slice(0, shelf.rows), shelf.store.write_shard(records.slice(0, shelf.rows), shelf.folder, shelf.run))
    records = pa.concat_tables(rests) if rests else None
    if records is not None and records.num_rows:
        yield _summary(records, shelf.store.write_shard(records, shelf.folder, shelf.run))


def _here(engine, publish: Publish, batches: Iterator[list[dict]], rows: int) -> Iterator[pa.Table]:
    """What a Ray Data engine's pipeline gives, for an engine that answers in this process."""
    held: list[dict] = []
    for staged_rows_ in batches:
        by_key = {r["cache_key"]: r for r in staged_rows_}
        for answers in engine.answers(staged_rows_):
            held += [{**by_key[a["cache_key"]], **a} for a in answers]
            while len(held) >= rows:
                yield publish(pa.Table.from_pylist(held[:rows]))
                held = held[rows:]
    if held:
        yield publish(pa.Table.from_pylist(held))


class Answered:
    """Which of the keys sent to an engine have come back (sorted fixed-width bytes: ~40 bytes a key)."""

    def __init__(self, keys: pa.Array):
        self.keys = np.sort(fixed_width(keys))
        self.back = np.zeros(len(self.keys), dtype=bool)

    def mark(self, keys: pa.Array | np.ndarray, known_only: bool = False) -> np.ndarray:
        """Note `keys` (an Arrow array, or fixed-width keys) as back; one not sent is an error, or
        with `known_only` left out (a call sent for a row the plan then left out) and returned."""
        wanted = keys if isinstance(keys, np.ndarray) else fixed_width(keys)
        if not len(wanted) or not len(self.keys):
            if len(wanted) and not known_only:
                raise RuntimeError(f"the engine answered a row that was not sent: {wanted[0]!r}")
            return wanted
        at = np.minimum(np.searchsorted(self.keys, wanted), len(self.keys) - 1)
        found = self.keys[at] == wanted
        if not found.all() and not known_only:
            raise RuntimeError(f"the engine answered a row that was not sent: {wanted[~found][0]!r}")
        self.back[at[found]] = True
        return wanted[~found]

    def missing(self) -> list[str]:
        return [k.decode() for k in self.keys[~self.back]]


def _streamed_rows(staged: Streamed, columns: list[str]) -> Iterator[list[dict]]:
    """A streamed source's rows, a block at a time, for an engine in this process."""
    for table in as_made(staged.dataset(columns)):
        yield table.to_pylist()


def as_made(ds) -> Iterator[pa.Table]:
    """A Ray Dataset's blocks as Arrow tables, each handed over as soon as it is made. Ray's default
    (one batch prefetched) hands a block over only once the next one exists: the driver, which
    follows the shards by their summaries, would run a shard behind the published records."""
    return ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0)


def staged_rows(staged: StagedRows, columns: list[str]) -> Iterator[list[dict]]:
    """The staged rows (`columns`), a file at a time, for an engine in this process."""
    for path in staged.paths:
        with staged.fs.open(path, "rb") as f:
            table = pq.read_table(f)
        if len(staged.drop) and "locator" in table.column_names:
            table = table.filter(pc.invert(pc.is_in(table["locator"], value_set=pa.array(staged.drop))))
        yield table.select(columns).to_pylist()
