"""Polarity-reversal synthesis, end to end: seeds → plan → engine → judge → shards → derived tables.

Planning (tasks/synthesis/planning.py) runs in Ray Data tasks over the seed source's chunks: they validate,
key and look up every row in the cache index (two columns of the record shards,
tasks/synthesis/record_store.py), and render, count and stage the calls not yet cached; rows that fail
validation go to OUT/quarantine.parquet, and a prompt too long for the engine's context is recorded as
rejected there and then. Without a `limit`, planning and the engine are one Ray Data pipeline: the engine
starts with the run, and a chunk's calls go to it as they are staged, so the first answers arrive while later
chunks are still being read. With a `limit`, which seeds are kept is known only once every chunk is planned,
so the engine waits for the whole plan. Either way the stage after the engine judges each batch of answers
into records and publishes them as shards of `shard_rows` (tasks/synthesis/publishing.py); the driver receives
their summaries, for progress and costs. Each chunk also leaves one small row per seed row, from which the
driver decides duplicates, the limit and the seed map (dualview_core/synthesis/plan.py), and gives a record to
any planned call the engine never returned, so every planned row ends as a record. With `verify`, a pass over
the current records asks a second, cached question about every accepted row (tasks/synthesis/verification.py;
one engine start for all of them). Then a last Ray Data job over the chosen seeds' chunks derives the dual-
view rows and the rejections as parts the driver joins in source order, and report.md
(tasks/synthesis/deriving.py); the run is recorded in the manifest (its seed map in OUT/seed_map.parquet).
When nothing changed since the last run (same seeds, same shards, same settings) the derived files stand as
they are; when few seeds changed, the job derives only those and the last run's rows of the others are kept
(tasks/synthesis/patching.py). The driver holds the plan (tens of bytes per seed row), one shard's summary and one row group of the
derived tables, never the data set. Killed at any moment, a re-run picks up exactly where the published shards
end.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pyarrow as pa

from dualview_core.synthesis.cache_index import fixed_width, seed_diff, unique_seeds
from dualview_core.config import SynthesisConfig
from dualview_core.keys import canonical_json, content_digest, digest
from dualview_core.storage.integrity import damage, facts
from dualview_core.storage.layout import DERIVED_FILES, output_options
from dualview_core.synthesis.plan import Plan
from dualview_core.method.prompting import prompt_version, template_named
from dualview_core.data.sources import source_fingerprint
from dualview_core.synthesis.records import CostSummary
from tasks.synthesis.judging import Asking, RecordStage
from tasks.synthesis.planning import (PLANNED, STAGED, FirstPass, first_pass, plan_seeds, plan_stream, source_errors,
                                      streamed_plan, streams, unstaged)
from tasks.progress import Progress, duration
from tasks.synthesis.publishing import (COST_COLUMNS, PROGRESS_STEPS, Answered, Shelf, StagedRows, Streamed, published,
                                       shard_rows)
from tasks.synthesis.patching import derive_settings
from tasks.synthesis.record_store import RECORDS, RecordStore, new_run
from tasks.synthesis.staging import staged_info

PROGRESS_EVERY_S = 10.0  # at most one progress line this often (and always the last)
UNCHANGED = "synthesis: no change since the last run; its dual views, rejections and report stand"


def run_synthesis(seeds_path: str, out: str, cfg: SynthesisConfig, storage_options: dict | None = None,
                  progress: Progress = print, out_storage_options: dict | None = None) -> dict:
    """Synthesize what is missing under `out`; return the run summary (counts, costs, versions).

    `storage_options` are for the seeds, `out_storage_options` (default: the same) for the output."""
    out_options = output_options(out_storage_options, storage_options)
    store = RecordStore(out, out_options)
    with store.lock():
        store.clear_leftovers()
        start = time.perf_counter()
        source = source_fingerprint(seeds_path, storage_options)  # before reading: a later edit is a change
        template = template_named(cfg.prompt)
        version, model_id, sampling = prompt_version(template), cfg.model_id(), cfg.sampling.key()
        ask = Asking(cfg, template, version, model_id, sampling)
        manifest = store.manifest()
        if _as_left(store, cfg, ask, manifest.get("summary", {}), source):
            return _unchanged_run(store, manifest, start, progress)
        run = new_run()
        store.clear_work()  # a killed run's intermediate files
        shards_before = _shards_digest(store)  # as the last run left them, unless a killed run published some
        try:
            model_path = _model_path(cfg, progress)
            costs = CostSummary()
            job = first_pass(seeds_path, storage_options, store, ask, model_path, run, progress)
            if streams(job) and not _all_cached(store, cfg, ask, manifest.get("summary", {}), source):  # one stream
                plan, job = _stream(job, store, ask, costs, progress, model_path, run)
                counts = _counts(store, manifest, plan, progress, "sent")
            else:  # plan, then send the chosen seeds' calls, if any (the engine starts only then)
                plan, job = plan_seeds(job)
                counts = _counts(store, manifest, plan, progress, "to send")
                if plan.pending:
                    costs.started = time.perf_counter()  # first answers: from the engine's start, as when streamed
                    _call_engine(plan, ask, store, costs, progress, model_path, run)
            seed_map, validation, sent, chosen = plan.seed_map, plan.report, plan.pending, plan.seeds
            asked, calls = plan.asked, plan.calls
            del plan  # its keys and locators: what follows needs the seed map and the chosen seeds
            pa.default_memory_pool().release_unused()
            seed_fingerprint = content_digest(unique_seeds(seed_map)["seed_key"])  # as a query_id -> key map
            outputs = _outputs_fingerprint(store, cfg, ask, seed_fingerprint)
            previous = manifest.get("summary", {})
            if (not sent and _verdicts_final(cfg, previous) and previous.get("outputs_fingerprint") == outputs
                    and _derived_intact(store, previous)):
                derived = {k: previous[k] for k in ("dual_views", "rejected", "outcomes", "report", "outputs", "tallies")
                           if k in previous} | {"verify_retry": 0}
                progress(UNCHANGED)
            else:
                _say_damage(store, previous, progress)
                keep = _keepable(store, cfg, ask, previous, shards_before)
                derived = _derive(job, chosen, store, ask, costs, progress,
                                  (seed_map["seed_key"], asked, calls, previous["tallies"]) if keep else None)
                derived["outputs"] = _published(store)
                if cfg.verify:  # its pass may have published verdict shards
                    outputs = _outputs_fingerprint(store, cfg, ask, seed_fingerprint)
        finally:
            store.clear_work()
        summary = {
            "seeds": validation,
            "synthesis_seeds": seed_map.num_rows,
            "plan": counts,
            "cost": costs.as_dict(time.perf_counter() - start),
            **derived,
            "prompt": cfg.prompt,
            "filtering": cfg.filtering,
            "rationale": cfg.rationale,
            "prompt_version": version,
            "model_id": model_id,
            "seed_fingerprint": seed_fingerprint,
            "source_fingerprint": source,
            "outputs_fingerprint": outputs,
            "calls_fingerprint": _calls_fingerprint(store, cfg, ask, source),
            "derive_settings": derive_settings(ask, cfg),
            "shards_after": _shards_digest(store),
            "out": out,
        }
        store.write_manifest({"seed_map": store.write_seed_map(seed_map), "summary": summary})
        return summary


def _counts(store: RecordStore, manifest: dict, plan: Plan, progress: Progress, sending: str) -> dict:
    """The plan's counts against the last run's seeds, said on `progress`."""
    counts = {"pending": plan.pending, "cached": plan.cached, **seed_diff(store.previous_seed_map(manifest), plan.seed_map)}
    progress(f"synthesis: {plan.seed_map.num_rows} seeds, {plan.pending} {sending}, {plan.cached} cached "
             f"(new {counts['new']}, changed {counts['changed']}, removed {counts['removed']})")
    return counts


def _as_left(store: RecordStore, cfg: SynthesisConfig, ask: Asking, previous: dict, source: str) -> bool:
    """Whether the seed files and the cache are exactly as the last completed run left them (and it
    left nothing to retry), so this run has nothing to send and nothing to rewrite: decided from the
    files' fingerprint and the shards' names, without reading a seed or a record."""
    return (_verdicts_final(cfg, previous) and previous.get("source_fingerprint") == source and "seed_fingerprint" in previous
            and not previous.get("outcomes", {}).get("by_reason", {}).get("engine_error")
            and previous.get("outputs_fingerprint") == _outputs_fingerprint(store, cfg, ask, previous["seed_fingerprint"])
            and _derived_intact(store, previous))


def _calls_fingerprint(store: RecordStore, cfg: SynthesisConfig, ask: Asking, source: str) -> str:
    """What decides the calls a run asks for and which of them are answered: the seed files, the
    shards (by name) and the settings that key and choose calls."""
    parts = [source, store.shard_names(), ask.version, ask.model_id, ask.sampling, cfg.per_negative, cfg.max_error_runs,
             cfg.limit]
    return digest(canonical_json(parts))


def _all_cached(store: RecordStore, cfg: SynthesisConfig, ask: Asking, previous: dict, source: str) -> bool:
    """Whether the last completed run left every call of these seeds answered (same files, shards and
    call settings, nothing to retry), so this one sends none: it is not streamed, and the engine, an
    80B model on a cluster, is not started for a run that only judges and derives again (say under
    another filtering policy)."""
    return (previous.get("calls_fingerprint") == _calls_fingerprint(store, cfg, ask, source)
            and not previous.get("outcomes", {}).get("by_reason", {}).get("engine_error"))


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


def _model_path(cfg: SynthesisConfig, progress: Progress) -> str | None:
    """The vLLM engine's servable model folder (a packaged model is converted once); None otherwise."""
    if cfg.engine != "vllm":
        return None
    from tasks.synthesis.llm_models import resolve_llm

    return resolve_llm(cfg.vllm.model, cfg.model_cache_dir, progress)


def _call_engine(plan: Plan, ask: Asking, store: RecordStore, costs: CostSummary, progress: Progress,
                 model_path: str | None, run: str) -> None:
    """A record for every pending call: rejected before the engine (recorded by pass one), answered,
    or failed. The stage after the engine publishes the records (tasks/synthesis/publishing.py); this process
    follows the shards' summaries, so progress moves with every shard."""
    from tasks.synthesis.engines import start_wait
    from tasks.progress import Meter, waiting

    cfg, judging = ask.cfg, ask.judging
    meter = Meter("synthesis", plan.pending, "rows", progress, every_s=PROGRESS_EVERY_S)
    for _ in range(len(plan.recorded)):  # recorded by pass one: counted, never sent
        costs.add({"rejection": "prompt_too_long", "attempts": 0, "prompt_tokens": None, "completion_tokens": None,
                   "latency_s": None})
    if len(plan.recorded):
        progress(f"synthesis: {len(plan.recorded)} prompt(s) too long for the engine's context, rejected before sending")
        meter.start(already=len(plan.recorded))
    if not len(plan.staged):
        return
    staged = StagedRows(store.fs, tuple(store.work_files(STAGED)), plan.drop)
    sent, shelf = Answered(plan.staged), Shelf(store, RECORDS, run, shard_rows(cfg, len(plan.staged)))
    with waiting("synthesis", *start_wait(cfg), progress) as wait:
        for n, summary in enumerate(published(cfg, model_path, staged, judging.columns, RecordStage, (judging,), shelf, ask.prompted)):
            answered = account(summary, sent, costs)
            if n == 0:  # the rate counts from here: the engine answered these while it was starting
                progress(f"synthesis: engine ready after {duration(wait.stop())}; {answered} answered")
                meter.start(already=answered)
            else:
                meter.advance(answered, f"{costs.accepted} accepted")
    _record_missing(sent, store, judging, run, costs, meter, staged.paths)


def _record_missing(sent: Answered, store: RecordStore, judging, run: str, costs: CostSummary, meter, paths) -> None:
    """A record for every call sent that the engine never returned (the call is retried by a later run)."""
    missing = sent.missing()
    if missing:
        rows = staged_info(store.fs, paths, missing, judging.columns)
        records = RecordStage(judging)([{**r, "raw_response": None, "attempts": 1, "error": "engine returned no row"}
                                        for r in rows])
        store.write_shard(records, run=run)
        meter.advance(account(records, sent, costs), "engine returned no row for these")


def _stream(job: FirstPass, store: RecordStore, ask: Asking, costs: CostSummary, progress: Progress,
            model_path: str | None, run: str) -> tuple[Plan, FirstPass]:
    """Pass one and the engine as one Ray Data pipeline (tasks/synthesis/planning.py's `plan_stream`):
    each chunk's calls not cached go to the engine as the chunk is planned, and the records are
    published as they are judged. The plan is read once every chunk is planned; then every pending
    call gets a record, as in `_call_engine`. Calls of rows the plan leaves out (a duplicate in a
    later chunk) were sent all the same: their records join the cache and their costs count."""
    from tasks.progress import Meter, waiting
    from tasks.synthesis.engines import start_wait

    cfg, judging = ask.cfg, ask.judging
    job = replace(job, stream=True)
    expected = [c.expected_rows for c in job.chunks]  # source rows: the calls are known only once planned
    shelf = Shelf(store, RECORDS, run, shard_rows(cfg, sum(expected) if None not in expected else cfg.shard_rows * PROGRESS_STEPS))
    meter = Meter("synthesis", None, "rows", progress, every_s=PROGRESS_EVERY_S)
    answered: list = []  # the answered keys, fixed-width: which calls of the plan came back
    source = Streamed(lambda columns: plan_stream(job, columns))

    def planned() -> str:  # the reminders while the engine starts (their thread): what planning has done
        return f"{store.work_count(PLANNED)} of {len(job.chunks)} chunks planned"

    with source_errors(), waiting("synthesis", *start_wait(cfg), progress, status=planned) as wait:
        for n, summary in enumerate(published(cfg, model_path, source, judging.columns, RecordStage, (judging,), shelf, ask.prompted)):
            answered.append(fixed_width(summary["cache_key"]))
            back = account(summary, None, costs)
            if n == 0:
                progress(f"synthesis: engine ready after {duration(wait.stop())}; {back} answered")
                meter.start(already=back)
            else:
                meter.advance(back, f"{costs.accepted} accepted")
        if answered:
            meter.finish(f"{costs.accepted} accepted")
    plan = streamed_plan(job)
    for _ in range(len(plan.recorded)):  # recorded by pass one: counted, never sent
        costs.add({"rejection": "prompt_too_long", "attempts": 0, "prompt_tokens": None, "completion_tokens": None,
                   "latency_s": None})
    if len(plan.recorded):
        progress(f"synthesis: {len(plan.recorded)} prompt(s) too long for the engine's context, rejected before sending")
    sent = Answered(plan.staged)
    # answers to calls of rows the plan left out are not the plan's; one to a call no chunk staged is an error
    left_out = [sent.mark(keys, known_only=True) for keys in answered]
    del answered
    if len(stray := unstaged(store, np.concatenate(left_out) if left_out else np.empty(0, "S1"))):
        raise RuntimeError(f"the engine answered a row that was not sent: {stray[0]!r}")
    _record_missing(sent, store, judging, run, costs, meter, tuple(store.work_files(STAGED)))
    return plan, job


def account(summary: pa.Table, sent: Answered | None, costs: CostSummary) -> int:
    """Note a published shard's rows (a summary, or the records themselves) as answered and costed."""
    if sent is not None:
        sent.mark(summary["cache_key"])
    costs.mark_answers(summary.num_rows)
    for rec in summary.select(COST_COLUMNS).to_pylist():
        costs.add(rec)
    return summary.num_rows


def _outputs_fingerprint(store: RecordStore, cfg: SynthesisConfig, ask: Asking, seed_fingerprint: str) -> str:
    """What the derived files depend on: the seeds, the shards (by name: they are never rewritten)
    and the settings that choose and judge records."""
    from tasks.synthesis.record_store import VERIFICATIONS

    parts = [seed_fingerprint, store.shard_names(), store.shard_names(VERIFICATIONS), ask.version, ask.model_id,
             ask.sampling, cfg.per_negative, cfg.max_error_runs, cfg.filtering, cfg.geometry_filter, cfg.limit]
    if cfg.verify:  # what the verdicts' keys hold besides the rows
        from tasks.synthesis.verification import Verifier

        verifier = Verifier.of(cfg)
        parts += [verifier.version, verifier.sampling]
    return digest(canonical_json(parts))


def _derived_intact(store: RecordStore, previous: dict) -> bool:
    """Whether every derived file is there as the last run published it (size, rows). A damaged or
    missing one is said on `progress` by the caller's rebuild; the records hold all it needs."""
    published = previous.get("outputs", {})
    # local files: size and rows; on an object store the size alone: one request a file, as existence was
    return all(name in published and damage(store.fs, f"{store.root}/{name}", published[name], rows=store.local) is None
               for name in DERIVED_FILES)


def _say_damage(store: RecordStore, previous: dict, progress: Progress) -> None:
    """Name each derived file found damaged or missing before it is rebuilt from the records."""
    for name, recorded in previous.get("outputs", {}).items():
        problem = damage(store.fs, f"{store.root}/{name}", recorded)
        if problem:
            progress(f"synthesis: {store.out}/{name} is damaged ({problem}); rebuilding it from the records, no calls")


def _published(store: RecordStore) -> dict:
    """The facts (rows, bytes, digest) of every derived file, for the manifest."""
    return {name: facts(store.fs, f"{store.root}/{name}") for name in DERIVED_FILES}


def _derive(job, chosen, store: RecordStore, ask: Asking, costs: CostSummary, progress: Progress,
            keep: tuple | None = None) -> dict:
    """The dual views, rejections and report of the chosen seeds (tasks/synthesis/deriving.py). With `verify`, a
    pass of its own first asks the verifier about every accepted row it has no verdict on. With `keep`
    (the chosen seeds' keys, whether this run asked about each, their calls, and the last run's
    tallies), what tasks/synthesis/patching.py finds unchanged in the last run's files is kept."""
    import ray

    from tasks.synthesis.deriving import Current, derive
    from tasks.synthesis.patching import kept_rows

    index = store.index(max_error_runs=1)  # a key's first final record, else its failure in the shard that sorts last
    current = Current(job, ray.put(index))
    fetch = index.fetch if keep else None  # the driver holds the index only to keep rows
    del index
    if ask.cfg.verify:
        from tasks.synthesis.verification import Verdicts, Verifier, ask_missing

        verifier = Verifier.of(ask.cfg)
        ask_missing(current, chosen, verifier, costs, progress)
        current = Current(job, current.records, verifier, ray.put(Verdicts(verifier, store)))
    kept = kept_rows(store, keep[0], chosen, keep[1], keep[2], keep[3], fetch, ask) if keep else None
    return derive(current, chosen, costs, progress, kept)


def _keepable(store: RecordStore, cfg: SynthesisConfig, ask: Asking, previous: dict, shards_before: str) -> bool:
    """Whether the last run's derived files may be kept in part: derived under the same settings
    (without `verify`, whose verdicts this does not follow), with the record shards as it left them
    when this run started, intact, and with its counts saved."""
    return (not cfg.verify and "tallies" in previous and previous.get("derive_settings") == derive_settings(ask, cfg)
            and previous.get("shards_after") == shards_before and _derived_intact(store, previous))


def _shards_digest(store: RecordStore) -> str:
    """The record shards present, by name (never rewritten): a killed run's shards change it."""
    return digest(canonical_json(store.shard_names()))
