"""The optional verification pass of a synthesis run: one more engine call per accepted row.

Asks the engine, with prompts/verification.md, whether N* meets I_new, P+ breaks it, and I_new
stays on the query's topic (dualview_core/synthesis/verdicts.py). It runs in two steps, so a run of any
size starts the engine once:

1. `ask_missing` walks the current records (a batch of seeds at a time), stages the prompt of every
   accepted row that has no verdict yet (tasks/synthesis/staging.py, in OUT/.work/verify/), then sends them all
   through one engine; the stage after it publishes the verdicts as shards of OUT/verifications/
   (tasks/synthesis/publishing.py), cached by content like the first pass's records. A re-run verifies only
   rows it has not seen.
2. `Verdicts.apply`, called by the pass that writes the dual views, rejects every accepted row the
   verifier did not confirm as `unverified`.

Calls and tokens are counted by step 1, the verifier's disagreement with the guards by step 2, both
in the run's CostSummary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq

from dualview_core.config import SynthesisConfig
from dualview_core.contracts import SYNTHESIS_RECORD
from dualview_core.keys import canonical_json
from dualview_core.method.parsing import Rejection
from dualview_core.method.prompting import prompt_version
from dualview_core.synthesis.records import CostSummary, WorkItem, error_rejection, seed_fields
from dualview_core.synthesis.verdicts import default_template, parse_verdict, render, verdict_rejection, verify_key
from tasks.progress import Progress
from tasks.synthesis.deriving import VERDICT_INFO, stage_questions
from tasks.synthesis.judging import Prompted
from tasks.synthesis.publishing import Answered, Shelf, StagedRows, published, shard_rows
from tasks.synthesis.record_store import VERIFICATIONS, RecordStore, new_run
from tasks.synthesis.staging import staged_info



@dataclass(frozen=True)
class Verifier(Prompted):
    """How this run verifies: the prompt, its version, the model and the sampling of the second call."""

    @property
    def pass_cfg(self) -> SynthesisConfig:
        """The run's config with the verification sampling: what the engine is built from."""
        return self.cfg.model_copy(update={"sampling": self.cfg.verify_sampling})

    @classmethod
    def of(cls, cfg: SynthesisConfig) -> Verifier:
        template = default_template()
        return cls(cfg, template, prompt_version(template), cfg.model_id(), cfg.verify_sampling.key())

    def keys(self, items: list[WorkItem], records: list[dict]) -> list[str | None]:
        """The verification key of each accepted record, None for the others."""
        return [verify_key(i.seed["seed_key"], i.target_index, r["instruction"], self.version, self.model_id, self.sampling)
                if r["rejection"] is None else None for i, r in zip(items, records)]

    def row(self, key: str, item: WorkItem, first: dict) -> dict:
        """A staged engine-input row: the prompt, and what the verdict's record needs (VERDICT_INFO)."""
        seed = item.seed
        return {"cache_key": key, "messages": render(seed, item.target_index, first["instruction"], self.template),
                "target_doc_id": seed["instruction_negatives"][item.target_index]["doc_id"],
                "seed_key": seed["seed_key"], "target_index": item.target_index, "instruction": first["instruction"],
                **seed_fields(seed)}


def ask_missing(current, seeds, verifier: Verifier, costs: CostSummary, progress: Progress) -> None:
    """Step 1: every accepted row of the chosen `seeds` (locators) without a verdict is staged by a Ray
    Data task per chunk (tasks/synthesis/deriving.py), then asked, all through one engine. `current`:
    tasks.synthesis.deriving.Current, reading the current records."""
    import ray


    store = current.job.store
    settled = store.index(verifier.cfg.max_error_runs, folder=VERIFICATIONS)  # two columns per shard, not the records
    accepted, paths = stage_questions(replace(current, verifier=verifier, settled=ray.put(settled.index)), seeds)
    sent = sum(pq.ParquetFile(store.fs.open(p, "rb")).metadata.num_rows for p in paths)
    progress(f"verification: {accepted} accepted rows, {sent} to send")
    if paths:
        _ask(tuple(paths), verifier, store, costs, progress)


def _ask(paths: tuple[str, ...], verifier: Verifier, store: RecordStore, costs: CostSummary, progress: Progress) -> None:
    from tasks.synthesis.engines import start_wait
    from tasks.synthesis.llm_models import resolve_llm
    from tasks.progress import Meter, waiting

    cfg, pass_cfg = verifier.cfg, verifier.pass_cfg
    model_path = resolve_llm(cfg.vllm.model, cfg.model_cache_dir) if cfg.engine == "vllm" else None
    keys = pa.concat_arrays([pq.read_table(store.fs.open(p, "rb"), columns=["cache_key"])["cache_key"].combine_chunks()
                             for p in paths])
    sent, run = Answered(keys), new_run()
    shelf = Shelf(store, VERIFICATIONS, run, shard_rows(pass_cfg, len(keys)))

    def account(summary: pa.Table) -> int:
        sent.mark(summary["cache_key"])
        for rec in summary.select(["prompt_tokens", "completion_tokens"]).to_pylist():
            costs.add_verification_call(rec)
        return summary.num_rows

    meter = Meter("verification", len(keys), "rows", progress, every_s=10.0)
    with waiting("verification", *start_wait(pass_cfg), progress) as wait:
        staged = StagedRows(store.fs, paths)
        for n, summary in enumerate(published(pass_cfg, model_path, staged, list(VERDICT_INFO), VerdictStage, (verifier,), shelf)):
            answered = account(summary)
            if n == 0:
                wait.stop()
                meter.start(already=answered)
            else:
                meter.advance(answered)
    missing = sent.missing()  # no row back: unverified now, asked again next run
    if missing:
        rows = staged_info(store.fs, paths, missing, list(VERDICT_INFO))
        records = VerdictStage(verifier)([{**row, "error": "engine returned no row", "attempts": 1} for row in rows])
        store.write_shard(records, VERIFICATIONS, run)
        account(records)


class VerdictStage:
    """Verification answers with their staged VERDICT_INFO -> a SYNTHESIS_RECORD table: the stage after the
    engine in the verification pass (`tasks.synthesis.engines.judged`)."""

    def __init__(self, verifier: Verifier):
        self.verifier = verifier

    def __call__(self, rows: list[dict]) -> pa.Table:
        return pa.Table.from_pylist([_record(row, self.verifier) for row in rows], schema=SYNTHESIS_RECORD)


class Verdicts:
    """Step 2: each accepted record's verdict (after `ask_missing`, every one has a record)."""

    def __init__(self, verifier: Verifier, store: RecordStore):
        self.verifier, self.retry = verifier, 0  # retry: verdicts that failed transiently and are asked again next run
        self.index = store.index(max_error_runs=1, folder=VERIFICATIONS)  # a key's first final verdict, else its failure in the shard that sorts last
        self.settled = store.index(verifier.cfg.max_error_runs, folder=VERIFICATIONS)  # what `ask_missing` will not ask again

    def apply(self, items: list[WorkItem], records: list[dict], costs: CostSummary) -> list[dict]:
        """`records` (aligned with `items`) with the accepted rows the verifier does not confirm rejected."""
        keys = self.verifier.keys(items, records)
        asked = [k for k in keys if k is not None]
        verdicts = iter(self.index.fetch(asked))
        out = []
        for key, rec in zip(keys, records):
            if key is None:
                out.append(rec)
                continue
            check = next(verdicts)
            if check is None:
                raise RuntimeError(f"accepted row {rec['cache_key']} has no verdict under {VERIFICATIONS}/ (key {key})")
            costs.add_verdict(check)
            self.retry += check["rejection"] == Rejection.ENGINE_ERROR.value and key not in self.settled
            out.append(rec if check["rejection"] is None else {**rec, "rejection": Rejection.UNVERIFIED.value})
        return out


def _record(row: dict, verifier: Verifier) -> dict:
    """A SynthesisRecord for one verification answer (`row`: the result with its staged VERDICT_INFO):
    rejection None (confirmed) or why not."""
    error = row.get("error")
    rejection = error_rejection(error) if error else verdict_rejection(parse_verdict(row.get("raw_response")))
    return {
        "cache_key": row["cache_key"], "seed_key": row["seed_key"], "target_index": row["target_index"],
        "prompt_version": verifier.version, "model_id": verifier.model_id,
        "sampling_params": canonical_json(verifier.sampling).decode(),
        "raw_response": error or row.get("raw_response"), "instruction": row["instruction"],
        "rejection": rejection.value if rejection else None, "geometry_delta": None,
        "prompt_tokens": row.get("prompt_tokens"), "completion_tokens": row.get("completion_tokens"),
        "latency_s": row.get("latency_s"), "attempts": row.get("attempts") or 1,
        "query_id": row["query_id"], "query": row["query"], "original_instruction": row["original_instruction"],
    }
