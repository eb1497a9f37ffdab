"""The first pass of a synthesis run, as a Ray Data job: every chunk of the seed source is read,
validated, keyed and checked against the cache index by a Ray Data task, in parallel, wherever the
cluster has CPUs; the same task renders the calls not yet cached, counts their prompt tokens, and
stages them for the engine in OUT/.work/staged/ (a row too long for the engine's context is recorded
as rejected there and then, in a shard of its own). Rows that fail validation go to
OUT/.work/quarantine/; a chunk that asks about few of its seeds keeps copies of them for the
derive pass (tasks/synthesis/seed_copies.py). The driver gets back one PLAN_ROW per source row and decides what only the
whole source decides (dualview_core/synthesis/plan.py): duplicates, the limit, the seed map, the report; then
it writes OUT/quarantine.parquet from the chunks' parts, in source order.

Without a `limit` (`streams`), the pass streams (`plan_stream`): each task yields its chunk's staged
calls as they are written, into the engine's Ray Data pipeline, and leaves its PLAN_ROW part in
OUT/.work/plan/; the driver reads the parts once the stream ends (`streamed_plan`). A chunk's calls thus
reach the engine before the last chunk is read. A task sends nothing for a row whose identity an
earlier row of its chunk has (the plan quarantines it); a duplicate found in a later chunk has been
sent all the same: its record joins the cache.

With a `limit`, a first job only plans (no index, no rendering) and a second one stages the seeds
chosen, so a smoke run on a large source renders a few rows, not all of them. Duplicates are rare:
their raw rows are read again by a small job of their own, for the quarantine.

The driver holds the plan (dualview_core/synthesis/plan.py: tens of bytes a source row), one chunk's
quarantine while it writes the file, never a row's passages. A task holds one batch of rows and one
staged file's rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.data.chunks import Chunk, locator, split
from dualview_core.config import ValidationConfig
from dualview_core.contracts import PLAN_ROW, QUARANTINE, Rejected
from dualview_core.storage.tables import TableWriter, quarantine_table
from dualview_core.synthesis.cache_index import fixed_width
from dualview_core.synthesis.plan import Plan, PlanBuilder, PlanRows, with_calls
from dualview_core.method.prompting import render
from dualview_core.data.seeds import acyclic, duplicate, identity, is_synthesis_seed, rejected, validate
from dualview_core.data.sources import SourceError, chunks, read_rows
from dualview_core.storage.filesystems import filesystem, is_remote
from dualview_core.synthesis.records import cache_key, prompt_too_long, targets
from tasks.synthesis.judging import Asking, RecordStage, engine_row
from tasks.synthesis.record_store import WORK, RecordStore
from tasks.synthesis.seed_copies import SeedCopies
from tasks.synthesis.staging import StagedFiles, staged_schema
from tasks.progress import Progress

STAGED, QUARANTINED, PLANNED = "staged", "quarantine", "plan"
PLAN_CPUS = 1.0  # a chunk task validates and renders: CPU-bound, one core
# In the streaming pass a chunk task shares the cluster with the engine's actors, which reserve
# their CPUs first (a CPU vLLM replica a whole one): a task asking for a whole CPU too would wait
# for ever on a 2-core machine. It asks for half, and at most half the cluster's CPUs plan at once.
STREAM_PLAN_CPUS = 0.5
# Ray Data gathers what a task yields into blocks of up to its target size (128 MiB by default, a
# chunk's every call), and each stage after it hands on nothing of a block before it has answered all
# of it: the first answers would wait for the first chunk's last, and a crash would lose every answer
# held in the engine. So the stream's blocks are about one engine batch (`stream_block_bytes`): answers
# reach the shards as they come, and a killed run repeats little more than its calls in flight and a
# shard's worth of answers.
STAGED_CALL_BYTES = 4 << 10  # a staged call (its rendered prompt with two passages), on the small side
MIN_STREAM_BLOCK_BYTES = 64 << 10  # fewer, larger blocks for an engine with small batches


def stream_block_bytes(batch_rows: int) -> int:
    """The stream's target block size for an engine batch of `batch_rows` calls.

        >>> stream_block_bytes(256), stream_block_bytes(8)
        (1048576, 65536)
    """
    return max(MIN_STREAM_BLOCK_BYTES, batch_rows * STAGED_CALL_BYTES)


@dataclass(frozen=True)
class FirstPass:
    """What every chunk task of a job needs: the source and its chunks, how to ask, where to write,
    and what the job does: `stage` the calls not cached, or only plan; `duplicates`: quarantine the
    rows it is given as duplicates. Which rows of a chunk a task reads comes with the task."""

    seeds: str
    seed_options: dict | None
    chunks: tuple[Chunk, ...]
    validation: ValidationConfig
    ask: Asking
    store: RecordStore
    run: str
    model_path: str | None = None
    index: object = None  # an ObjectRef of the cache's KeyIndex (staging jobs only)
    stage: bool = True
    duplicates: bool = False
    stream: bool = False  # staged rows also handed on as they are written (`stream_chunk`)


def streams(job: FirstPass) -> bool:
    """Whether the first pass feeds the engine as it plans: whenever no `limit` waits on the whole
    plan. The engine starts at once, while the first chunk is read, so its start (minutes for a
    large model) overlaps planning. A source whose calls all turn out cached has started it for
    nothing; the driver does not stream when the last run shows them all answered (same files,
    shards and call settings: `tasks.synthesis.driver._all_cached`)."""
    return job.ask.cfg.limit is None and len(job.chunks) > 0  # no chunk, no stream: Ray Data wants a block


def plan_seeds(job: FirstPass) -> tuple[Plan, FirstPass]:
    """Pass one as a job of its own: the plan of this run (dualview_core.synthesis.plan.Plan), with the
    calls not cached staged under OUT/.work/staged/ and OUT/quarantine.parquet written; and the job
    (what later passes over the same chunks need)."""
    job = replace(job, stage=job.ask.cfg.limit is None)
    builder = PlanBuilder()
    for table in _run(job):
        builder.add(table)
    plan = builder.resolve(job.ask.cfg.limit)
    pa.default_memory_pool().release_unused()  # resolving's temporaries, back to the system
    if not job.stage and len(plan.seeds):  # the limit's second job: only the seeds chosen
        plan = with_calls(plan, list(_run(replace(job, stage=True), plan.seeds)))
    return _finish(job, plan), job


def first_pass(seeds: str, seed_options: dict | None, store: RecordStore, ask: Asking, model_path: str | None,
               run: str, progress: Progress) -> FirstPass:
    """The first pass's job over the seed source's chunks, with the cache index sent to the cluster."""
    import ray

    from tasks.synthesis.ray_runtime import ensure_ray

    _shared(seeds, store, ask.cfg.ray_address)
    ensure_ray(ask.cfg.ray_address)
    _, pieces = chunks(seeds, seed_options)
    index = store.index(ask.cfg.max_error_runs)  # two columns of each shard, not the records
    progress(f"synthesis: reading {seeds} in {len(pieces)} chunk(s) on the Ray cluster")
    return FirstPass(seeds, seed_options, tuple(pieces), ValidationConfig(), ask, store, run, model_path,
                     index=ray.put(index.index))


def plan_stream(job: FirstPass, columns: list[str]):
    """The streaming first pass as a Ray Data Dataset: a task per chunk plans it and hands on the
    calls not cached (their `columns`) as it stages them, so the engine stage after it starts on the
    first chunk's calls while the others are read. `streamed_plan` reads the plan afterwards."""
    import ray

    items = [{"chunk": c} for c in range(len(job.chunks))]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    ds.context.raise_original_map_exception = True  # a task's SourceError reaches the driver as one
    ds.context.target_max_block_size = stream_block_bytes(job.ask.batch_rows)  # this pipeline's, the engine's too
    planners = max(1, int(ray.cluster_resources().get("CPU", 1) // 2))
    return ds.map_batches(_stream_task, fn_args=(job, columns), batch_size=1, batch_format="pyarrow",
                          num_cpus=STREAM_PLAN_CPUS, concurrency=planners)


def _stream_task(batch: pa.Table, job: FirstPass, columns: list[str]) -> Iterator[pa.Table]:
    for c in batch["chunk"].to_pylist():
        yield from stream_chunk(job, c, columns)


def streamed_plan(job: FirstPass) -> Plan:
    """The plan of a streaming first pass, from the chunks' PLAN_ROW parts (every chunk planned by
    then), with the duplicates quarantined and OUT/quarantine.parquet written."""
    builder = PlanBuilder()
    for path in job.store.work_files(PLANNED):
        builder.add(_read(job.store, path))
    plan = builder.resolve(None)
    pa.default_memory_pool().release_unused()
    return _finish(job, plan)


def unstaged(store: RecordStore, keys: np.ndarray) -> np.ndarray:
    """Those of `keys` (fixed-width) that no chunk of a streaming first pass staged, for rows the plan
    kept or left out: answers the engine cannot have been asked for. Each PLAN_ROW part is read
    in turn (its `staged` column only), so the driver never holds every staged key at once."""
    for path in store.work_files(PLANNED):
        if not len(keys):
            break
        staged = pc.list_flatten(_read(store, path, columns=["staged"])["staged"])
        if len(staged):
            keys = keys[~np.isin(keys, fixed_width(staged))]
    return keys


def _finish(job: FirstPass, plan: Plan) -> Plan:
    if len(plan.duplicates):
        for _ in _run(replace(job, stage=False, duplicates=True), plan.duplicates):
            pass
    _write_quarantine(job.store, plan)
    return plan


@contextmanager
def source_errors() -> Iterator[None]:
    """A chunk task's SourceError, raised in this process as one line (Ray's error is an instance of
    it, whose text is Ray's traceback)."""
    try:
        yield
    except SourceError as exc:
        raise SourceError(_source_message(exc)) from None


def _shared(seeds: str, store: RecordStore, address: str | None) -> None:
    """Refuse, before anything starts, a Ray Client driver (`ray://`) with local paths: its tasks run
    on the cluster's nodes, which cannot read this machine's files."""
    local = [p for p in (seeds, store.out) if not is_remote(p)]
    if (address or "").startswith("ray://") and local:
        raise SourceError(f"{local[0]}: a local path, but a Ray Client driver ({address}) runs its tasks on the "
                          "cluster's nodes; put seeds and output on storage they read (s3://...)")


def _run(job: FirstPass, wanted: np.ndarray | None = None):
    return run_chunks(plan_chunk, job, len(job.chunks), wanted)


def run_chunks(task: Callable, spec: object, n_chunks: int, wanted: np.ndarray | None = None):
    """`task(spec, chunk, rows)` as a Ray Data job, a task per chunk: of every row (`rows` None), or of
    the `wanted` ones (locators), each task given its chunk's. The tasks' tables as they finish."""
    import ray

    if wanted is None:
        items = [{"chunk": c, "rows": None} for c in range(n_chunks)]
    else:
        chunk_of, row_of = split(wanted)
        items = [{"chunk": int(c), "rows": row_of[chunk_of == c].tolist()} for c in np.unique(chunk_of)]
    if not items:
        return
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    ds.context.raise_original_map_exception = True  # a task's SourceError reaches this process as one
    ds = ds.map_batches(_chunk_task, fn_args=(task, spec), batch_size=1, batch_format="pyarrow", num_cpus=PLAN_CPUS)
    with source_errors():
        yield from ds.iter_batches(batch_size=None, batch_format="pyarrow")


def _source_message(exc: BaseException) -> str:
    """The first line of the task's own SourceError in `exc`'s chain (Ray keeps it as a cause of the
    error it raises here, itself an instance of SourceError whose text is Ray's traceback)."""
    from ray.exceptions import RayError

    todo, seen = [exc], set()
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, SourceError) and not isinstance(e, RayError):
            return str(e).strip().splitlines()[0]
        todo += [e.__cause__, getattr(e, "cause", None), e.__context__]
    return str(exc).strip().splitlines()[-1]


def _chunk_task(batch: pa.Table, task: Callable, spec: object) -> pa.Table:
    return pa.concat_tables([task(spec, item["chunk"], None if item["rows"] is None else set(item["rows"]))
                             for item in batch.to_pylist()])


def validated(job: FirstPass, c: int, wanted: set[int] | None):
    """Chunk `c`'s rows (its `wanted` ones only, when given), a batch at a time, as (raw row, SEED_ROW
    dict or Rejected) pairs."""
    fs = filesystem(job.seeds, job.seed_options)[0]
    for batch in read_rows(fs, job.chunks[c], job.validation.batch_rows, wanted):
        with acyclic():
            results = [(raw, validate(raw, job.validation)) for raw in batch]
        yield results


_TOOLS: dict = {}  # per worker process: the cache index and the prompt counter, loaded once for many chunks


def tool(name: str, key: object, load: Callable[[], object]) -> object:
    """What `load` gives, kept in this worker process under `name` while `key` stays the same."""
    if _TOOLS.get(name, (None,))[0] != key:
        _TOOLS[name] = (key, load())
    return _TOOLS[name][1]


def plan_chunk(job: FirstPass, c: int, wanted: set[int] | None = None) -> pa.Table:
    """Read, validate, key, look up and (when staging) render, count and stage chunk `c` (its
    `wanted` rows only, when given); its PLAN_ROW table."""
    parts = _planned(job, c, wanted)
    while True:
        try:
            next(parts)
        except StopIteration as done:
            return done.value


def stream_chunk(job: FirstPass, c: int, columns: list[str]) -> Iterator[pa.Table]:
    """`plan_chunk` for the streaming pass: chunk `c`'s calls not cached (their `columns`), as each
    staged file is written, for the engine stage that follows; its PLAN_ROW table goes to
    OUT/.work/plan/, where the driver reads it once every chunk is planned."""
    parts = _planned(replace(job, stream=True), c, None)
    while True:
        try:
            staged = next(parts)
        except StopIteration as done:
            with TableWriter(job.store.path(f"{WORK}/{PLANNED}/{c:06d}.parquet"), PLAN_ROW, job.store.options) as w:
                w.write(done.value)
            return
        yield staged.select(columns)


def _planned(job: FirstPass, c: int, wanted: set[int] | None) -> Generator[pa.Table, None, pa.Table]:
    """`plan_chunk`'s work; with `job.stream`, yields each staged file's rows as it is written."""
    ask = job.ask
    rows, bad = PlanRows(c), []
    staged = StagedFiles(job.store.fs, job.store.work(STAGED), f"{c:06d}", ask.batch_rows,
                         staged_schema([*ask.staged_columns, "locator"]), keep=job.stream) if job.stage else None
    too_long: list[dict] = []
    copies = SeedCopies() if job.stage and not job.duplicates else None  # for the derive pass
    seen: set[str] = set()  # this chunk's valid identities: a repeat is the plan's duplicate, never sent
    for results in validated(job, c, wanted):
        with acyclic():  # Python rows: see dualview_core.data.seeds.acyclic
            if job.duplicates:
                bad += [rejected(raw, *duplicate(seed)) for raw, seed in results if not isinstance(seed, Rejected)]
                continue
            calls = _calls(job, [(raw.index, seed) for raw, seed in results
                                        if not isinstance(seed, Rejected) and is_synthesis_seed(seed)])
            for raw, seed in results:
                if isinstance(seed, Rejected):
                    rows.quarantined(raw.index, seed.reason)
                    bad.append(seed)
                    continue
                n, send, refused = calls.get(raw.index, (0, [], []))
                rows.valid(raw.index, seed, [r["cache_key"] for r in send], [r["cache_key"] for r in refused], calls=n)
                if (who := identity(seed)) in seen:  # quarantined as duplicate_id once the plan is read
                    continue
                seen.add(who)
                if copies is not None and (send or refused):
                    copies.add(raw.index, seed)
                if staged:
                    staged.add([{**r, "locator": locator(c, raw.index)} for r in send])
                too_long += refused
        if staged:
            yield from staged.take()
    if staged:
        staged.close()
        yield from staged.take()
    if bad:
        name = f"{c:06d}{'-dup' if job.duplicates else ''}.parquet"
        with TableWriter(job.store.path(f"{WORK}/{QUARANTINED}/{name}"), QUARANTINE, job.store.options) as w:
            w.write(quarantine_table(bad, job.seeds))
    if too_long:  # rejected before the engine: recorded here, in a shard of their own
        job.store.write_shard(RecordStage(ask.judging)(too_long), run=job.run)
    if copies is not None:
        copies.write(job.store, c)
    return rows.table()


def _calls(job: FirstPass, seeds: list[tuple[int, dict]]) -> dict[int, tuple[int, list, list]]:
    """row -> (calls, rows to stage, results of rows too long for the engine) for a batch's synthesis
    seeds; without staging, only the number of calls."""
    ask = job.ask
    keyed = [(row, seed, t, cache_key(seed["seed_key"], t, ask.version, ask.model_id, ask.sampling))
             for row, seed in seeds for t in targets(seed, ask.cfg.per_negative)]
    out = {row: (0, [], []) for row, _ in seeds}
    for row, _, _, _ in keyed:
        n, send, refused = out[row]
        out[row] = (n + 1, send, refused)
    if not job.stage:
        return out
    import ray

    from tasks.synthesis.engines import prompt_sizer

    found = tool("index", job.index, lambda: ray.get(job.index)).lookup([k for *_, k in keyed])
    if (found >= 0).all():  # all cached: no prompt to render or count (no tokenizer loaded)
        return out
    sizer = tool("sizer", (ask.cfg.model_dump_json(), job.model_path), lambda: prompt_sizer(ask.cfg, job.model_path))
    prompted = ask.prompted
    if prompted and sizer is None:  # the engine would get rows without a prompt, each one failing
        raise RuntimeError(f"engine {ask.cfg.engine!r} reads templated prompts, but no tokenizer was found to template them")
    for (row, seed, t, key), at in zip(keyed, found):
        if at >= 0:
            continue
        staged = engine_row(seed, t, key, render(seed, t, ask.template, ask.cfg.prompt), ask.geometry)
        error = None
        if sizer is not None:
            text = sizer.text(staged["messages"])
            tokens = sizer.tokens(text)
            error = prompt_too_long(tokens, ask.cfg.sampling.max_tokens, sizer.context)
            if prompted:
                staged["prompt"] = text
        if error:
            out[row][2].append({**{k: staged[k] for k in ask.judging.columns}, "raw_response": None,
                                "prompt_tokens": tokens, "attempts": 0, "error": error})
        else:
            out[row][1].append(staged)
    return out


def _write_quarantine(store: RecordStore, plan: Plan) -> None:
    """OUT/quarantine.parquet from the chunks' parts, in source order, with positions across the
    source (a chunk's part numbers its rows within the chunk). Written even when empty."""
    parts: dict[int, list[str]] = {}
    for path in store.work_files(QUARANTINED):
        parts.setdefault(int(os.path.basename(path)[:6]), []).append(path)
    with TableWriter(store.path("quarantine.parquet"), QUARANTINE, store.options) as out:
        for c in sorted(parts):
            table = pa.concat_tables([_read(store, p) for p in parts[c]])
            table = table.take(pc.sort_indices(table["row_index"]))
            positions = table["row_index"].to_numpy() + plan.offsets.get(c, 0)
            out.write(table.set_column(table.schema.get_field_index("row_index"), "row_index", pa.array(positions)))


def _read(store: RecordStore, path: str, columns: list[str] | None = None) -> pa.Table:
    import pyarrow.parquet as pq

    with store.fs.open(path, "rb") as f:
        return pq.read_table(f, columns=columns)

