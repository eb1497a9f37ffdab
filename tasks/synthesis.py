"""Polarity-reversal synthesis, end to end: seeds → render → engine → parse and guard → shards.

The run reads and validates the seeds (bad rows to OUT/quarantine.parquet), plans which calls are
not yet cached, streams only those through the engine inside a Ray Data pipeline, and publishes each
finished group of answers as one shard. A row whose prompt cannot fit the engine's context is
rejected before the engine (prompt_too_long); a row the engine fails on is recorded with its reason,
so every planned row ends as a record. With `verify`, accepted rows get a second, cached call
(tasks/verification.py). Then it derives the dual-view rows, the rejections and report.md for the
current seeds and records the run in the manifest. Killed at any moment, a re-run picks up exactly
where the published shards end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from dualview_core.config import SynthesisConfig
from dualview_core.contracts import DUAL_VIEW_ROW, SYNTHESIS_RECORD
from dualview_core.dual_view import make_dual_view
from dualview_core.io import write_table
from dualview_core.keys import content_digest
from dualview_core.loading import stream_seeds
from dualview_core.parsing import Rejection, judge
from dualview_core.prompting import default_template, prompt_version, render
from dualview_core.seeds import select_synthesis_seeds
from dualview_core.sources import source_fingerprint
from dualview_core.synthesis import (CostSummary, EngineResult, WorkItem, outcomes, plan, prompt_too_long, record,
                                     seed_fields)
from dualview_core.synthesis_report import render_report
from tasks.progress import duration
from tasks.record_store import RecordStore

Progress = Callable[[str], None]
PROGRESS_EVERY_S = 10.0  # at most one progress line this often (and always the last)


def run_synthesis(seeds_path: str, out: str, cfg: SynthesisConfig, storage_options: dict | None = None,
                  progress: Progress = print, out_storage_options: dict | None = None) -> dict:
    """Synthesize what is missing under `out`; return the run summary (counts, costs, versions).

    `storage_options` are for the seeds, `out_storage_options` (default: the same) for the output."""
    out_options = storage_options if out_storage_options is None else out_storage_options
    store = RecordStore(out, out_options)
    with store.lock():
        start = time.perf_counter()
        source = source_fingerprint(seeds_path, storage_options)  # before reading: a later edit is a change
        batches, validator = stream_seeds(seeds_path, storage_options, quarantine_path=store.path("quarantine.parquet"),
                                          quarantine_options=out_options)
        seeds = [row for batch in batches for row in select_synthesis_seeds(batch).to_pylist()][: cfg.limit]
        template = default_template()
        version, model_id, sampling = prompt_version(template), cfg.model_id(), cfg.sampling.model_dump(mode="json")
        cached = store.records(cfg.max_error_runs)
        work = plan(seeds, set(cached), store.manifest().get("seeds", {}), per_negative=cfg.per_negative,
                    prompt_version=version, model_id=model_id, sampling=sampling)
        progress(f"synthesis: {len(seeds)} seeds, {len(work.pending)} to send, {len(work.cached)} cached "
                 f"(new {work.new}, changed {work.changed}, removed {work.removed})")
        costs = CostSummary()
        ask = _Asking(cfg, template, version, model_id, sampling)
        fresh = _call_engine(work.pending, ask, store, costs, progress) if work.pending else {}
        items = work.cached + work.pending
        records = [{**(cached.get(i.cache_key) or fresh[i.cache_key]), **seed_fields(i.seed)} for i in items]
        if cfg.verify:
            from tasks.verification import verify

            records = verify(items, records, cfg, store, costs, progress)
        dual_views = _write_outputs(store, items, records, out_options)
        counts = outcomes(records)
        report = store.write_text("report.md", render_report(records, counts, prompt_version=version, model_id=model_id))
        summary = {
            "seeds": validator.report.as_dict(),
            "synthesis_seeds": len(seeds),
            "plan": work.counts(),
            "cost": costs.as_dict(time.perf_counter() - start),
            "dual_views": dual_views,
            "rejected": len(records) - dual_views,
            "outcomes": counts,
            "report": report,
            "prompt_version": version,
            "model_id": model_id,
            "seed_fingerprint": content_digest(work.seeds.values()),
            "source_fingerprint": source,
            "out": out,
        }
        store.write_manifest({"seeds": work.seeds, "summary": summary})
        return summary


@dataclass(frozen=True)
class _Asking:
    """How this run asks: everything that goes into a record besides the answer itself."""

    cfg: SynthesisConfig
    template: str
    version: str
    model_id: str
    sampling: dict


def _call_engine(pending: list[WorkItem], ask: _Asking, store: RecordStore, costs: CostSummary,
                 progress: Progress) -> dict[str, dict]:
    """A record for every pending item: rejected before the engine, answered, or failed."""
    from tasks.engines import answer_batches, start_wait
    from tasks.llm_models import resolve_llm
    from tasks.progress import Meter, waiting

    cfg = ask.cfg
    model_path = resolve_llm(cfg.vllm.model, cfg.model_cache_dir, progress) if cfg.engine == "vllm" else None
    items = {i.cache_key: i for i in pending}
    rows = [{"cache_key": i.cache_key, "messages": render(i.seed, i.target_index, ask.template), **engine_fields(i)}
            for i in pending]
    fresh: dict[str, dict] = {}
    meter = Meter("synthesis", len(pending), "rows", progress, every_s=PROGRESS_EVERY_S)

    def publish(results: list[dict]) -> int:
        costs.mark_answers(len(results))
        shard = _records(results, items, ask, geometry)
        store.write_shard(shard)
        for rec in shard:
            costs.add(rec)
            fresh[rec["cache_key"]] = rec
        return len(shard)

    geometry = _geometry(cfg)
    rows, too_long = _fit(rows, cfg, model_path)
    if too_long:
        progress(f"synthesis: {len(too_long)} prompt(s) too long for the engine's context, rejected before sending")
        meter.start(already=publish(too_long))
    if rows:
        with waiting("synthesis", *start_wait(cfg), progress) as wait:
            for n, results in enumerate(answer_batches(cfg, model_path, rows)):
                answered = publish(results)
                if n == 0:  # the rate counts from here: the engine answered this batch while it was starting
                    progress(f"synthesis: engine ready after {duration(wait.stop())}; {answered} answered")
                    meter.start(already=answered)
                else:
                    meter.advance(answered, f"{costs.accepted} accepted")
    missing = [k for k in items if k not in fresh]  # never left without a record (and retried later)
    if missing:
        meter.advance(publish([{"cache_key": k, "raw_response": None, "attempts": 1, "error": "engine returned no row"}
                               for k in missing]), "engine returned no row for these")
    return fresh


def engine_fields(item: WorkItem) -> dict:
    """What an engine may read besides the messages: which seed, and which instruction negative is N*.
    LLM engines ignore them; the reference engine answers from them."""
    return {"query_id": item.seed["query_id"], "query": item.seed["query"],
            "target_doc_id": item.seed["instruction_negatives"][item.target_index]["doc_id"]}


def _fit(rows: list[dict], cfg: SynthesisConfig, model_path: str | None) -> tuple[list[dict], list[dict]]:
    """(rows to send, results for rows whose prompt + max_tokens exceeds the engine's context)."""
    from tasks.engines import prompt_counter

    counter = prompt_counter(cfg, model_path)
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


def _records(results: list[dict], items: dict[str, WorkItem], ask: _Asking, geometry) -> list[dict]:
    judged = []
    for r in results:
        item = items[r["cache_key"]]
        result = EngineResult(**{k: r[k] for k in EngineResult.__slots__ if k in r})
        judged.append((item, result, judge(result.raw_response, item.seed["instruction"], item.seed["query"], ask.cfg.guards)))
    deltas = geometry(judged) if geometry else [None] * len(judged)
    out = []
    for (item, result, parsed), delta in zip(judged, deltas):
        rec = record(item, result, parsed, prompt_version=ask.version, model_id=ask.model_id, sampling=ask.sampling,
                     geometry_delta=delta)
        if delta is not None and delta <= 0 and rec["rejection"] is None:
            rec["rejection"] = Rejection.GEOMETRY.value
        out.append(rec)
    return out


def _geometry(cfg: SynthesisConfig):
    """A function judged-rows -> deltas (None where no instruction), or None when the filter is off."""
    if not cfg.geometry_filter:
        return None
    from dualview_core.encoder import Encoder
    from dualview_core.geometry import geometry_deltas

    encoder = Encoder(cfg.geometry_encoder)

    def deltas(judged: list) -> list[float | None]:
        usable = [(i, item, parsed) for i, (item, _, parsed) in enumerate(judged) if parsed.instruction]
        targets = [item.seed["instruction_negatives"][item.target_index] for _, item, _ in usable]
        values = geometry_deltas(encoder, [item.seed["query"] for _, item, _ in usable],
                                 [parsed.instruction for _, _, parsed in usable], [(t["title"], t["text"]) for t in targets])
        out: list[float | None] = [None] * len(judged)
        for (i, _, _), value in zip(usable, values):
            out[i] = value
        return out

    return deltas


def _write_outputs(store: RecordStore, items: list[WorkItem], records: list[dict], storage_options) -> int:
    """dual_views.parquet (accepted) and rejections.parquet (the rest) for the current seeds."""
    seeds = {i.cache_key: i.seed for i in items}
    accepted = [r for r in records if r["rejection"] is None]
    dual_views = [
        make_dual_view(seeds[r["cache_key"]], r["instruction"], target_index=r["target_index"],
                       prompt_version=r["prompt_version"], model_id=r["model_id"])
        for r in accepted
    ]
    write_table(store.path("dual_views.parquet"), pa.Table.from_pylist(dual_views, schema=DUAL_VIEW_ROW), DUAL_VIEW_ROW, storage_options)
    rejected = [r for r in records if r["rejection"] is not None]
    write_table(store.path("rejections.parquet"), pa.Table.from_pylist(rejected, schema=SYNTHESIS_RECORD), SYNTHESIS_RECORD, storage_options)
    return len(dual_views)
