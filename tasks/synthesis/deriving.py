"""The last passes of a synthesis run, as Ray Data jobs over the chosen seeds' chunks: what the
current seeds' records say, written where a person and the trainer read it.

Each task reads the chosen seeds of one chunk (the plan's locators): from the copies the first pass
kept of the seeds it asked about, when they hold them all (tasks/synthesis/seed_copies.py: a run
that changed few seeds), else from the source, validated again. It fetches each call's record from the cache (the index goes to the
workers once; a worker reads the shards it needs, a few at a time). Then:

- `derive` (every run that changed something): the run's filtering policy applied to every record
  (`records.under_policy`: a cached record may have been judged under another), with `verify` the
  verifier's verdicts; the chunk's dual-view rows and rejections written to OUT/.work/derived/;
  back to the driver, its outcome counts and first examples per reason. The driver writes dual_views.parquet and
  rejections.parquet from the parts in source order (a row group at a time), and report.md. When the
  last run's files hold most chosen seeds as they stand (tasks/synthesis/patching.py), only the
  others are derived, and each file is their rows merged with the last run's kept ones.
- `stage_questions` (with `verify`): the verification prompt of every accepted row without a verdict,
  staged in OUT/.work/verify/ for tasks/synthesis/verification.py's engine pass.

A planned row without a record fails the run: every planned row has one by then. The driver holds
the counts, a few examples and a few row groups (the next READ_AHEAD decoded while one is
written: dualview_core/storage/tables.py); a task holds a batch of seeds.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dualview_core.contracts import DUAL_VIEW_ROW, SYNTHESIS_RECORD, Rejected
from dualview_core.method.dual_view import make_dual_view
from dualview_core.storage.tables import TableWriter, read_ahead
from dualview_core.storage.layout import DUAL_VIEWS, REJECTIONS, REPORT
from dualview_core.data.chunks import locator
from dualview_core.data.seeds import acyclic
from dualview_core.synthesis.records import CostSummary, WorkItem, cache_key, seed_fields, guard_verdict, targets, under_policy
from dualview_core.synthesis.report import EXAMPLES_PER_REASON, render_report, reply_lengths
from tasks.progress import Progress
from tasks.synthesis.patching import DERIVED, LOCATOR, Kept, Tally, derived_parts, located, patch
from tasks.synthesis.planning import FirstPass, run_chunks, tool, validated
from tasks.synthesis.record_store import WORK, RecordStore
from tasks.synthesis.seed_copies import copied
from tasks.synthesis.staging import StagedFiles, staged_schema

# a verification question as staged: the prompt, and what its verdict's record needs (VERDICT_INFO)
VERDICT_INFO = ("cache_key", "seed_key", "target_index", "instruction", "query_id", "query", "original_instruction")
QUESTION = ("cache_key", "messages", "target_doc_id", *VERDICT_INFO[1:])

QUESTIONS = "verify"  # OUT/.work/verify/: the staged verification prompts


@dataclass(frozen=True)
class Current:
    """What a task needs to read the current records: the first pass's job (source, chunks, how it
    asked, the store), and the records' index as an ObjectRef. With `verify`: the verifier, and as
    ObjectRefs the verdicts (`derive`, tasks/synthesis/verification.py's Verdicts) or the index of the
    verdicts already settled (`stage_questions`)."""

    job: FirstPass
    records: object
    verifier: object = None
    verdicts: object = None
    settled: object = None


def seed_batches(cur: Current, c: int, wanted: set[int] | None) -> tuple[Iterator, bool]:
    """Chunk `c`'s chosen seeds as (raw row, seed) batches: from the first pass's copies when they
    hold them all (tasks/synthesis/seed_copies.py), else read and validated again from the source;
    and whether they came from the copies."""
    batches = copied(cur.job.store, c, wanted, cur.job.validation.batch_rows)
    return (batches, True) if batches is not None else (validated(cur.job, c, wanted), False)


def current_records(cur: Current, c: int, batches: Iterator) -> Iterator[tuple[list[WorkItem], list[dict], list[int]]]:
    """(work items, their records with the seed columns, their seeds' locators) of chunk `c`'s chosen
    seeds (`seed_batches`), a batch at a time."""
    import ray

    ask, index = cur.job.ask, tool("records", cur.records, lambda: ray.get(cur.records))
    for results in batches:
        with acyclic():
            chosen = [(locator(c, raw.index), seed) for raw, seed in results if not isinstance(seed, Rejected)]
            at = [where for where, seed in chosen for _ in targets(seed, ask.cfg.per_negative)]
            items = [WorkItem(seed, t, cache_key(seed["seed_key"], t, ask.version, ask.model_id, ask.sampling))
                     for _, seed in chosen for t in targets(seed, ask.cfg.per_negative)]
            found = index.fetch([i.cache_key for i in items])
            lost = [i.cache_key for i, rec in zip(items, found) if rec is None]
            if lost:
                raise RuntimeError(f"{len(lost)} planned row(s) have no record under {cur.job.store.out}/records, e.g. {lost[0]}")
            policy, geometry = ask.cfg.filtering, ask.cfg.geometry_filter  # a cached record may be from another policy
            yield items, [{**rec, **seed_fields(i.seed), "guard": guard_verdict(rec),
                           "rejection": under_policy(rec, policy, geometry)} for i, rec in zip(items, found)], at


def derive_chunk(cur: Current, c: int, wanted: set[int] | None) -> pa.Table:
    """Chunk `c`'s dual views and rejections, written as parts (each row with its seed's locator, for a
    merge with the last run's rows: tasks/synthesis/patching.py); its counts and examples returned."""
    import ray

    store = cur.job.store
    verdicts = tool("verdicts", cur.verdicts, lambda: ray.get(cur.verdicts)) if cur.verdicts else None
    retry_before = verdicts.retry if verdicts else 0
    costs, tally, examples = CostSummary(), Tally(), {}
    views = TableWriter(store.path(f"{WORK}/{DERIVED}/{c:06d}-views.parquet"), located(DUAL_VIEW_ROW), store.options)
    rejections = TableWriter(store.path(f"{WORK}/{DERIVED}/{c:06d}-rejections.parquet"), located(SYNTHESIS_RECORD),
                             store.options)
    batches, from_copies = seed_batches(cur, c, wanted)
    with views, rejections:
        for items, records, at in current_records(cur, c, batches):
            if verdicts:
                records = verdicts.apply(items, records, costs)
            views.write(pa.Table.from_pylist([{**make_dual_view(i.seed, r["instruction"], target_index=r["target_index"],
                                                                prompt_version=r["prompt_version"], model_id=r["model_id"]),
                                               LOCATOR: where}
                                              for i, r, where in zip(items, records, at) if r["rejection"] is None],
                                             schema=located(DUAL_VIEW_ROW)))
            rejections.write(pa.Table.from_pylist([{**r, LOCATOR: where} for r, where in zip(records, at)
                                                   if r["rejection"] is not None], schema=located(SYNTHESIS_RECORD)))
            tally.add(records)
            for r in records:
                reason = r["rejection"] or "accepted"
                if len(examples.setdefault(reason, [])) < EXAMPLES_PER_REASON:
                    examples[reason].append(r)
    summary = {**tally.as_dict(), "examples": examples, "verify_checked": costs.verify_checked,
               "verify_failed": costs.verify_failed, "verify_retry": verdicts.retry - retry_before if verdicts else 0,
               "from_copies": from_copies}
    return pa.table({"chunk": [c], "summary": [json.dumps(summary)]})


def derive(cur: Current, seeds: np.ndarray, costs: CostSummary, progress: Progress, kept: Kept | None = None) -> dict:
    """Dual views, rejections and report.md of the chosen `seeds` (locators); the outcome counts.
    With `kept` (tasks/synthesis/patching.py), only the seeds it does not keep are derived, and the
    files are the last run's kept rows merged with theirs."""
    store, ask = cur.job.store, cur.job.ask
    tally, examples, retry, chunks = Tally(), {}, 0, []
    for table in run_chunks(derive_chunk, cur, len(cur.job.chunks), seeds if kept is None else kept.reuse.fresh):
        for c, text in zip(table["chunk"].to_pylist(), table["summary"].to_pylist()):
            summary = json.loads(text)
            chunks.append((c, summary))
    for _, summary in sorted(chunks, key=lambda x: x[0]):  # source order: the same examples as a sequential pass
        tally.merge(summary)
        for reason, rows in summary["examples"].items():
            examples[reason] = (examples.get(reason, []) + rows)[:EXAMPLES_PER_REASON]
        costs.verify_checked += summary["verify_checked"]
        costs.verify_failed += summary["verify_failed"]
        retry += summary["verify_retry"]
    order = sorted(c for c, _ in chunks)
    progress(f"synthesis: {len(order)} chunk(s) derived; writing {DUAL_VIEWS} and {REJECTIONS}"
             + (" with the last run's kept rows" if kept is not None else ""))
    parts = {DUAL_VIEWS: [f"{c:06d}-views.parquet" for c in order], REJECTIONS: [f"{c:06d}-rejections.parquet" for c in order]}
    if kept is None:
        views = _merge(store, DUAL_VIEWS, DUAL_VIEW_ROW, parts[DUAL_VIEWS])
        _merge(store, REJECTIONS, SYNTHESIS_RECORD, parts[REJECTIONS])
    else:
        written, examples = patch(store, kept.reuse, parts, kept.fetch, ask)
        views, tally = written[DUAL_VIEWS], kept.base.plus(tally)
        copies = sum(summary["from_copies"] for _, summary in chunks)
        progress(f"synthesis: the last run's rows of {kept.reuse.kept} unchanged seeds kept, "
                 f"{len(kept.reuse.fresh)} seeds derived (read from the first pass's copies in {copies} of "
                 f"{len(chunks)} chunks)")
    outcomes = Counter(tally.outcomes)
    accepted = outcomes.pop("accepted", 0)
    counts = {"accepted": accepted, "rejected": sum(outcomes.values()), "by_reason": dict(sorted(outcomes.items())),
              "filtering": ask.cfg.filtering, "guard_verdicts": dict(sorted(tally.guards.items())),
              "reply_tokens": reply_lengths(tally.lengths, ask.cfg.sampling.max_tokens)}
    sample = [r for reason in sorted(examples) for r in examples[reason]]
    report = store.write_text(REPORT, render_report(sample, counts, prompt_version=ask.version, model_id=ask.model_id,
                                                    prompt=ask.cfg.prompt))
    progress(f"synthesis: {views} dual views and {counts['rejected']} rejections written")
    return {"dual_views": views, "rejected": counts["rejected"], "outcomes": counts, "report": report, "verify_retry": retry,
            "tallies": tally.as_dict()}


def _merge(store: RecordStore, name: str, schema: pa.Schema, parts: list[str]) -> int:
    """OUT/<name> from the parts in OUT/.work/derived/ (their rows' locators left out), in the order
    given, a row group at a time (read ahead on a thread of its own while the last is encoded);
    written (empty) even when there is none. Returns its rows."""
    with TableWriter(store.path(name), schema, store.options) as out:
        with closing(read_ahead(derived_parts(store, parts))) as groups:
            for table, _ in groups:
                out.write(table)
    return out.rows


def question_chunk(cur: Current, c: int, wanted: set[int] | None) -> pa.Table:
    """Stage the verification prompt of chunk `c`'s accepted rows that have no verdict yet."""
    import ray


    verifier, store = cur.verifier, cur.job.store
    settled = tool("settled", cur.settled, lambda: ray.get(cur.settled))  # not to be asked again
    files = StagedFiles(store.fs, store.work(QUESTIONS), f"{c:06d}", cur.job.ask.batch_rows, staged_schema(QUESTION))
    accepted = sent = 0
    for items, records, _ in current_records(cur, c, seed_batches(cur, c, wanted)[0]):
        asked = [(k, i, r) for k, i, r in zip(verifier.keys(items, records), items, records) if k is not None]
        accepted += len(asked)
        rows = [verifier.row(k, i, r) for (k, i, r), at in zip(asked, settled.lookup([k for k, _, _ in asked])) if at < 0]
        files.add(rows)
        sent += len(rows)
    files.close()
    return pa.table({"chunk": [c], "accepted": [accepted], "sent": [sent]})


def stage_questions(cur: Current, seeds: np.ndarray) -> tuple[int, list[str]]:
    """Stage the verification prompts of the chosen `seeds`' accepted rows without a settled verdict
    (`question_chunk`, a task per chunk): (accepted rows, the staged files)."""
    accepted = sum(sum(t["accepted"].to_pylist()) for t in run_chunks(question_chunk, cur, len(cur.job.chunks), seeds))
    return accepted, cur.job.store.work_files(QUESTIONS)
