"""Polarity-reversal synthesis, end to end: seeds → render → engine → parse and guard → shards.

The run streams the seeds batch by batch (bad rows to OUT/quarantine.parquet) and decides from the
cache index (two columns of the record shards, tasks/record_store.py) which calls are not yet
cached. Only those are rendered and staged, in bounded Parquet files, for the engine, which reads
them inside a Ray Data pipeline (or in this process, for the reference engine); a stage after the
engine judges each batch of answers into records (tasks/judging.py), and this process publishes
them in shards of `shard_rows`. A row whose prompt cannot fit the engine's context is
rejected before the engine (prompt_too_long); a row the engine fails on is recorded with its reason,
so every planned row ends as a record. With `verify`, a pass over the current records asks a second,
cached question about every accepted row (tasks/verification.py; one engine start for all of them).
Then a last pass over the seeds derives the dual-view rows, the rejections and report.md for the
current seeds, streaming, and the run is recorded in the manifest (its seed map in
OUT/seed_map.parquet). When nothing changed since the last run (same seeds, same
shards, same settings) the derived files stand as they are. The driver holds one batch of seeds,
the index and the pending rows' keys, never the data set. Killed at any moment, a re-run picks up
exactly where the published shards end.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.cache_index import SEED_MAP, seed_diff, unique_seeds
from dualview_core.config import SynthesisConfig
from dualview_core.contracts import DUAL_VIEW_ROW, SYNTHESIS_RECORD
from dualview_core.dual_view import make_dual_view
from dualview_core.io import TableWriter
from dualview_core.keys import canonical_json, content_digest, digest
from dualview_core.loading import stream_seeds
from dualview_core.prompting import default_template, prompt_version, render
from dualview_core.seeds import select_synthesis_seeds
from dualview_core.sources import source_fingerprint
from dualview_core.synthesis import CostSummary, WorkItem, cache_key, prompt_too_long, seed_fields, targets
from dualview_core.synthesis_report import EXAMPLES_PER_REASON, render_report
from tasks.engines import batch_rows
from tasks.judging import Judging, RecordStage
from tasks.progress import duration
from tasks.record_store import RecordStore, ShardWriter
from tasks.staging import PendingInfo, StagedFiles

Progress = Callable[[str], None]
PROGRESS_EVERY_S = 10.0  # at most one progress line this often (and always the last)
UNCHANGED = "synthesis: no change since the last run; its dual views, rejections and report stand"


def run_synthesis(seeds_path: str, out: str, cfg: SynthesisConfig, storage_options: dict | None = None,
                  progress: Progress = print, out_storage_options: dict | None = None) -> dict:
    """Synthesize what is missing under `out`; return the run summary (counts, costs, versions).

    `storage_options` are for the seeds, `out_storage_options` (default: the same) for the output."""
    out_options = storage_options if out_storage_options is None else out_storage_options
    store = RecordStore(out, out_options)
    with store.lock():
        start = time.perf_counter()
        source = source_fingerprint(seeds_path, storage_options)  # before reading: a later edit is a change
        template = default_template()
        version, model_id, sampling = prompt_version(template), cfg.model_id(), cfg.sampling.model_dump(mode="json")
        ask = _Asking(cfg, template, version, model_id, sampling)
        manifest = store.manifest()
        if _as_left(store, cfg, ask, manifest.get("summary", {}), source):
            return _unchanged_run(store, manifest, start, progress)
        model = _Model(cfg, progress)
        try:
            staged = _stage(seeds_path, storage_options, store, out_options, ask, model)
            seed_map = staged.seed_map()
            counts = {"pending": staged.pending, "cached": staged.cached, **seed_diff(store.previous_seed_map(manifest), seed_map)}
            progress(f"synthesis: {seed_map.num_rows} seeds, {staged.pending} to send, {staged.cached} cached "
                     f"(new {counts['new']}, changed {counts['changed']}, removed {counts['removed']})")
            costs = CostSummary()
            if staged.pending:
                _call_engine(staged, ask, store, costs, progress, model)
        finally:
            store.remove_staging()
        seed_fingerprint = content_digest(unique_seeds(seed_map)["seed_key"].to_pylist())  # as a query_id -> key map
        outputs = _outputs_fingerprint(store, cfg, ask, seed_fingerprint)
        previous = manifest.get("summary", {})
        if (not staged.pending and _verdicts_final(cfg, previous) and previous.get("outputs_fingerprint") == outputs
                and _derived_exist(store)):
            derived = {k: previous[k] for k in ("dual_views", "rejected", "outcomes", "report")} | {"verify_retry": 0}
            progress(UNCHANGED)
        else:
            derived = _derive(seeds_path, storage_options, store, out_options, ask, costs, progress)
            if cfg.verify:  # its pass may have published verdict shards
                outputs = _outputs_fingerprint(store, cfg, ask, seed_fingerprint)
        summary = {
            "seeds": staged.validation,
            "synthesis_seeds": seed_map.num_rows,
            "plan": counts,
            "cost": costs.as_dict(time.perf_counter() - start),
            **derived,
            "prompt_version": version,
            "model_id": model_id,
            "seed_fingerprint": seed_fingerprint,
            "source_fingerprint": source,
            "outputs_fingerprint": outputs,
            "out": out,
        }
        store.write_manifest({"seed_map": store.write_seed_map(seed_map), "summary": summary})
        return summary


def _as_left(store: RecordStore, cfg: SynthesisConfig, ask: _Asking, previous: dict, source: str) -> bool:
    """Whether the seed files and the cache are exactly as the last completed run left them (and it
    left nothing to retry), so this run has nothing to send and nothing to rewrite: decided from the
    files' fingerprint and the shards' names, without reading a seed or a record."""
    return (_verdicts_final(cfg, previous) and previous.get("source_fingerprint") == source and "seed_fingerprint" in previous
            and not previous.get("outcomes", {}).get("by_reason", {}).get("engine_error")
            and previous.get("outputs_fingerprint") == _outputs_fingerprint(store, cfg, ask, previous["seed_fingerprint"])
            and _derived_exist(store))


def _verdicts_final(cfg: SynthesisConfig, previous: dict) -> bool:
    """Whether verification leaves nothing to ask again: off, or the last run's verdicts all final
    (none failed transiently). Older manifests do not say, so they are asked."""
    return not cfg.verify or previous.get("verify_retry") == 0


def _unchanged_run(store: RecordStore, manifest: dict, start: float, progress: Progress) -> dict:
    previous = manifest["summary"]
    seeds = store.previous_seed_map(manifest)
    planned = previous["plan"]["pending"] + previous["plan"]["cached"]
    counts = {"pending": 0, "cached": planned, "new": 0, "changed": 0, "removed": 0, "unchanged": unique_seeds(seeds).num_rows}
    progress(f"synthesis: {seeds.num_rows} seeds, 0 to send, {planned} cached (new 0, changed 0, removed 0)")
    progress(UNCHANGED)
    summary = {**previous, "plan": counts, "cost": CostSummary().as_dict(time.perf_counter() - start)}
    store.write_manifest({**{k: v for k, v in manifest.items() if k != "summary"}, "summary": summary})
    return summary


@dataclass(frozen=True)
class _Asking:
    """How this run asks: everything that goes into a record besides the answer itself."""

    cfg: SynthesisConfig
    template: str
    version: str
    model_id: str
    sampling: dict

    @property
    def judging(self) -> Judging:
        cfg = self.cfg
        return Judging(self.version, self.model_id, self.sampling, cfg.guards,
                       cfg.geometry_encoder if cfg.geometry_filter else None)


class _Model:
    """The engine's model path and prompt counter, resolved at first need (a run with nothing to
    send never loads a tokenizer or converts a model)."""

    def __init__(self, cfg: SynthesisConfig, progress: Progress):
        self.cfg, self.progress, self._path, self._counter = cfg, progress, None, False

    @property
    def path(self) -> str | None:
        if self._path is None and self.cfg.engine == "vllm":
            from tasks.llm_models import resolve_llm

            self._path = resolve_llm(self.cfg.vllm.model, self.cfg.model_cache_dir, self.progress)
        return self._path

    def counter(self):
        if self._counter is False:
            from tasks.engines import prompt_counter

            self._counter = prompt_counter(self.cfg, self.path)
        return self._counter


@dataclass
class _Staged:
    """Pass one's result: the seed map, and the pending rows staged for the engine together with
    what a record of each needs (tasks/judging.py's INFO, TARGET columns), which the engine carries
    through to the stage that judges its answers."""

    validation: dict = field(default_factory=dict)
    paths: tuple[str, ...] = ()  # engine input and each row's info
    too_long: list[dict] = field(default_factory=list)  # results for rows rejected before the engine
    too_long_info: list[dict] = field(default_factory=list)  # and their info (few: held here)
    seed_maps: list[pa.Table] = field(default_factory=list)
    pending: int = 0
    cached: int = 0

    def seed_map(self) -> pa.Table:
        return pa.concat_tables(self.seed_maps) if self.seed_maps else SEED_MAP.empty_table()


def _seed_batches(seeds_path: str, storage_options, limit: int | None, **quarantine) -> tuple[Iterator[pa.Table], object]:
    """Synthesis seeds (SEED_ROW tables), a validated batch at a time, the first `limit` only. The
    source is read to its end either way, so the validation report and quarantine are complete."""
    batches, validator = stream_seeds(seeds_path, storage_options, **quarantine)

    def seeds() -> Iterator[pa.Table]:
        left = limit
        for batch in batches:
            selected = select_synthesis_seeds(batch)
            if left is not None:
                selected = selected.slice(0, max(left, 0))
                left -= selected.num_rows
            if selected.num_rows:
                yield selected

    return seeds(), validator


def _keys(batch: pa.Table, ask: _Asking) -> list[tuple[int, int, str]]:
    """(row, target_index, cache_key) of every call a SEED_ROW batch asks for, from three columns."""
    negatives = pc.list_value_length(batch["instruction_negatives"]).to_pylist()
    out = []
    for row, (seed_key, n) in enumerate(zip(batch["seed_key"].to_pylist(), negatives)):
        for t in targets({"instruction_negatives": range(n or 0)}, ask.cfg.per_negative):
            out.append((row, t, cache_key(seed_key, t, ask.version, ask.model_id, ask.sampling)))
    return out


def _items(seeds: list[dict], ask: _Asking) -> list[WorkItem]:
    return [WorkItem(seed, t, cache_key(seed["seed_key"], t, ask.version, ask.model_id, ask.sampling))
            for seed in seeds for t in targets(seed, ask.cfg.per_negative)]


def _stage(seeds_path: str, storage_options, store: RecordStore, out_options, ask: _Asking, model: _Model) -> _Staged:
    """Pass one over the seeds: the seed map, cached vs pending, and the pending rows rendered and
    staged in bounded files (prompts too long for the engine become results here)."""
    index = store.index(ask.cfg.max_error_runs)
    staged, files = _Staged(), StagedFiles(store.staging(), batch_rows(ask.cfg))
    seeds, validator = _seed_batches(seeds_path, storage_options, ask.cfg.limit, quarantine_path=store.path("quarantine.parquet"),
                                     quarantine_options=out_options)
    geometry = ask.cfg.geometry_filter
    for batch in seeds:
        staged.seed_maps.append(batch.select(["query_id", "seed_key"]))
        keys = _keys(batch, ask)
        found = index.lookup([k for _, _, k in keys])
        todo = [(row, t, k) for (row, t, k), at in zip(keys, found) if at < 0]
        staged.cached += len(keys) - len(todo)
        staged.pending += len(todo)
        if not todo:
            continue
        rows_needed = sorted({row for row, _, _ in todo})  # only these become Python objects
        seeds_by_row = dict(zip(rows_needed, batch.take(pa.array(rows_needed)).to_pylist()))
        pending = [WorkItem(seeds_by_row[row], t, k) for row, t, k in todo]
        rows = [{**_info(i, geometry), "messages": render(i.seed, i.target_index, ask.template), **engine_fields(i)}
                for i in pending]
        rows, too_long = _fit(rows, ask.cfg, model)
        if too_long:
            rejected = {r["cache_key"] for r in too_long}
            staged.too_long += too_long
            staged.too_long_info += [_info(i, geometry) for i in pending if i.cache_key in rejected]
        files.add(rows)
    staged.paths = files.close()
    staged.validation = validator.report.as_dict()
    return staged


def _info(item: WorkItem, geometry: bool) -> dict:
    """What the record of a pending row needs besides the answer (INFO, and TARGET for the geometry filter)."""
    row = {"cache_key": item.cache_key, "seed_key": item.seed["seed_key"], "target_index": item.target_index,
           "query_id": item.seed["query_id"], "query": item.seed["query"], "instruction": item.seed["instruction"]}
    if geometry:
        target = item.seed["instruction_negatives"][item.target_index]
        row |= {"target_title": target["title"], "target_text": target["text"]}
    return row


def _call_engine(staged: _Staged, ask: _Asking, store: RecordStore, costs: CostSummary, progress: Progress,
                 model: _Model) -> None:
    """A record for every pending item: rejected before the engine, answered, or failed. Answers are
    judged into records in a stage after the engine (tasks/judging.py); this process publishes them
    in shards of `shard_rows`, and progress moves with every engine batch."""
    from tasks.engines import StagedRows, judged, start_wait
    from tasks.progress import Meter, waiting

    cfg, judging = ask.cfg, ask.judging
    info = PendingInfo(staged.paths, staged.too_long_info, judging.columns)
    meter = Meter("synthesis", staged.pending, "rows", progress, every_s=PROGRESS_EVERY_S)
    shards = ShardWriter(store, cfg.shard_rows)

    def publish(records: pa.Table) -> int:
        costs.mark_answers(records.num_rows)
        info.mark(records["cache_key"].to_pylist())
        for rec in records.select(["rejection", "attempts", "prompt_tokens", "completion_tokens", "latency_s"]).to_pylist():
            costs.add(rec)
        shards.add(records)
        return records.num_rows

    def here(results: list[dict]) -> pa.Table:  # rows that never reached the engine: judged in this process
        infos = info.take([r["cache_key"] for r in results])
        return RecordStage(judging)([{**i, **r} for r, i in zip(results, infos)])

    if staged.too_long:
        progress(f"synthesis: {len(staged.too_long)} prompt(s) too long for the engine's context, rejected before sending")
        meter.start(already=publish(here(staged.too_long)))
    if staged.paths:
        with waiting("synthesis", *start_wait(cfg), progress) as wait:
            batches = judged(cfg, model.path, StagedRows(staged.paths), judging.columns, RecordStage, judging)
            for n, records in enumerate(batches):
                answered = publish(records)
                if n == 0:  # the rate counts from here: the engine answered this batch while it was starting
                    progress(f"synthesis: engine ready after {duration(wait.stop())}; {answered} answered")
                    meter.start(already=answered)
                else:
                    meter.advance(answered, f"{costs.accepted} accepted")
    missing = info.unanswered()  # never left without a record (and retried later)
    if missing:
        meter.advance(publish(here([{"cache_key": k, "raw_response": None, "attempts": 1, "error": "engine returned no row"}
                                    for k in missing])), "engine returned no row for these")
    shards.close()


def engine_fields(item: WorkItem) -> dict:
    """What an engine may read besides the messages: which seed, and which instruction negative is N*.
    LLM engines ignore them; the reference engine answers from them."""
    return {"query_id": item.seed["query_id"], "query": item.seed["query"],
            "target_doc_id": item.seed["instruction_negatives"][item.target_index]["doc_id"]}


def _fit(rows: list[dict], cfg: SynthesisConfig, model: _Model) -> tuple[list[dict], list[dict]]:
    """(rows to send, results for rows whose prompt + max_tokens exceeds the engine's context)."""
    counter = model.counter()
    if counter is None:
        return rows, []
    count, context = counter
    send, rejected = [], []
    for row in rows:
        tokens = count(row["messages"])
        error = prompt_too_long(tokens, cfg.sampling.max_tokens, context)
        if error:
            rejected.append({"cache_key": row["cache_key"], "raw_response": None, "prompt_tokens": tokens,
                             "attempts": 0, "error": error})
        else:
            send.append(row)
    return send, rejected


def _outputs_fingerprint(store: RecordStore, cfg: SynthesisConfig, ask: _Asking, seed_fingerprint: str) -> str:
    """What the derived files depend on: the seeds, the shards (by name: they are never rewritten)
    and the settings that choose and judge records."""
    from tasks.record_store import VERIFICATIONS

    parts = [seed_fingerprint, store.shard_names(), store.shard_names(VERIFICATIONS), ask.version, ask.model_id,
             ask.sampling, cfg.per_negative, cfg.max_error_runs, cfg.verify, cfg.limit]
    if cfg.verify:  # what the verdicts' keys hold besides the rows
        from tasks.verification import Verifier

        verifier = Verifier.of(cfg)
        parts += [verifier.version, verifier.sampling]
    return digest(canonical_json(parts))


def _derived_exist(store: RecordStore) -> bool:
    return all(store.fs.exists(f"{store.root}/{name}") for name in ("dual_views.parquet", "rejections.parquet", "report.md"))


def _current_records(seeds_path: str, storage_options, store: RecordStore, ask: _Asking) -> Iterator[tuple[list[WorkItem], list[dict]]]:
    """(work items, their records with the seed columns) for the current seeds, a seed batch at a
    time; every planned row must have a record by now."""
    index = store.index(max_error_runs=1)  # a key's first final record, else its latest failure
    seeds, _ = _seed_batches(seeds_path, storage_options, ask.cfg.limit)
    for batch in seeds:
        items = _items(batch.to_pylist(), ask)
        found = index.fetch([i.cache_key for i in items])
        lost = [i.cache_key for i, rec in zip(items, found) if rec is None]
        if lost:
            raise RuntimeError(f"{len(lost)} planned row(s) have no record under {store.out}/records, e.g. {lost[0]}")
        yield items, [{**rec, **seed_fields(i.seed)} for i, rec in zip(items, found)]


def _derive(seeds_path: str, storage_options, store: RecordStore, out_options, ask: _Asking, costs: CostSummary,
            progress: Progress) -> dict:
    """Pass two over the seeds: dual_views.parquet (accepted) and rejections.parquet (the rest) for
    the current seeds, streamed, with the outcome counts and report.md. With `verify`, a pass of its
    own first asks the verifier about every accepted row it has no verdict on."""
    cfg = ask.cfg
    verdicts = None
    if cfg.verify:
        from tasks.verification import Verdicts, Verifier, ask_missing

        verifier = Verifier.of(cfg)
        ask_missing(_current_records(seeds_path, storage_options, store, ask), verifier, store, costs, progress)
        verdicts = Verdicts(verifier, store)
    dual_views = TableWriter(store.path("dual_views.parquet"), DUAL_VIEW_ROW, out_options)
    rejections = TableWriter(store.path("rejections.parquet"), SYNTHESIS_RECORD, out_options)
    rejected: Counter = Counter()
    examples: dict[str, list[dict]] = {}
    try:
        for items, records in _current_records(seeds_path, storage_options, store, ask):
            if verdicts:
                records = verdicts.apply(items, records, costs)
            accepted = [make_dual_view(i.seed, r["instruction"], target_index=r["target_index"],
                                       prompt_version=r["prompt_version"], model_id=r["model_id"])
                        for i, r in zip(items, records) if r["rejection"] is None]
            dual_views.write(pa.Table.from_pylist(accepted, schema=DUAL_VIEW_ROW))
            rejections.write(pa.Table.from_pylist([r for r in records if r["rejection"] is not None], schema=SYNTHESIS_RECORD))
            for r in records:
                reason = r["rejection"] or "accepted"
                rejected[reason] += 1
                if len(examples.setdefault(reason, [])) < EXAMPLES_PER_REASON:
                    examples[reason].append(r)
    except BaseException:
        dual_views.abort()
        rejections.abort()
        raise
    dual_views.close()
    rejections.close()
    accepted = rejected.pop("accepted", 0)
    counts = {"accepted": accepted, "rejected": sum(rejected.values()), "by_reason": dict(sorted(rejected.items()))}
    sample = [r for reason in sorted(examples) for r in examples[reason]]
    report = store.write_text("report.md", render_report(sample, counts, prompt_version=ask.version, model_id=ask.model_id))
    return {"dual_views": dual_views.rows, "rejected": counts["rejected"], "outcomes": counts, "report": report,
            "verify_retry": verdicts.retry if verdicts else 0}
