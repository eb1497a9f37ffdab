"""The optional verification pass of a synthesis run: one more engine call per accepted row.

Called a bounded group of rows at a time. Asks the engine, with prompts/verification.md, whether N* meets I_new, P+ breaks it, and I_new
stays on the query's topic (dualview_core/verification.py). Answers are cached by content in
OUT/verifications/ like the first pass's, so a re-run verifies only rows it has not seen; a row
the verifier does not confirm is rejected as `unverified`. Its calls, tokens and disagreement with
the guards go into the run's CostSummary.
"""

from __future__ import annotations

from collections.abc import Callable

from dualview_core.config import SynthesisConfig
from dualview_core.keys import canonical_json
from dualview_core.parsing import Rejection
from dualview_core.prompting import prompt_version
from dualview_core.synthesis import CostSummary, WorkItem, error_rejection, seed_fields
from dualview_core.verification import default_template, parse_verdict, render, verdict_rejection, verify_key
from tasks.record_store import VERIFICATIONS, RecordStore, ShardWriter


def verify(items: list[WorkItem], records: list[dict], cfg: SynthesisConfig, store: RecordStore, costs: CostSummary,
           progress: Callable[[str], None]) -> list[dict]:
    """`records` (aligned with `items`) with accepted rows the verifier does not confirm rejected."""
    template = default_template()
    version, model_id = prompt_version(template), cfg.model_id()
    sampling = cfg.verify_sampling.model_dump(mode="json")
    keys = [verify_key(i.seed["seed_key"], i.target_index, r["instruction"], version, model_id, sampling)
            if r["rejection"] is None else None for i, r in zip(items, records)]
    asked = [k for k in keys if k is not None]
    index = store.index(cfg.max_error_runs, folder=VERIFICATIONS)  # two columns per shard, not the records
    cached = {k: rec for k, rec in zip(asked, index.fetch(asked)) if rec is not None}
    todo = {k: (i, r) for k, i, r in zip(keys, items, records) if k is not None and k not in cached}
    progress(f"verification: {sum(k is not None for k in keys)} accepted rows, {len(todo)} to send")
    fresh = _ask(todo, cfg, store, template, version, model_id, sampling, progress) if todo else {}
    out = []
    for key, rec in zip(keys, records):
        if key is None:
            out.append(rec)
            continue
        check = cached.get(key) or fresh[key]
        costs.add_verification(check, fresh=key in fresh)
        out.append(rec if check["rejection"] is None else {**rec, "rejection": Rejection.UNVERIFIED.value})
    return out


def _ask(todo: dict, cfg: SynthesisConfig, store: RecordStore, template: str, version: str, model_id: str,
         sampling: dict, progress: Callable[[str], None]) -> dict[str, dict]:
    from tasks.engines import answer_batches, start_wait
    from tasks.llm_models import resolve_llm
    from tasks.progress import Meter, waiting
    from tasks.ray_runtime import ensure_ray

    ensure_ray(cfg.ray_address)
    pass_cfg = cfg.model_copy(update={"sampling": cfg.verify_sampling})
    model_path = resolve_llm(cfg.vllm.model, cfg.model_cache_dir) if cfg.engine == "vllm" else None
    rows = [{"cache_key": k, "messages": render(i.seed, i.target_index, r["instruction"], template)}
            for k, (i, r) in todo.items()]
    fresh: dict[str, dict] = {}
    meter = Meter("verification", len(rows), "rows", progress, every_s=10.0)
    shards = ShardWriter(store, cfg.shard_rows, VERIFICATIONS)
    with waiting("verification", *start_wait(pass_cfg), progress) as wait:
        for results in answer_batches(pass_cfg, model_path, rows):
            shard = [_record(res, *todo[res["cache_key"]], version, model_id, sampling) for res in results]
            shards.add(shard)
            if not fresh:
                wait.stop()
                meter.start(already=len(shard))
            else:
                meter.advance(len(shard))
            fresh |= {rec["cache_key"]: rec for rec in shard}
    shards.close()
    for key in todo.keys() - fresh.keys():  # no row back: unverified now, asked again next run
        fresh[key] = _record({"cache_key": key, "error": "engine returned no row", "attempts": 1}, *todo[key],
                             version, model_id, sampling)
    return fresh


def _record(result: dict, item: WorkItem, first: dict, version: str, model_id: str, sampling: dict) -> dict:
    """A SynthesisRecord for one verification answer: rejection None (confirmed) or why not."""
    error = result.get("error")
    rejection = error_rejection(error) if error else verdict_rejection(parse_verdict(result.get("raw_response")))
    return {
        "cache_key": result["cache_key"], "seed_key": item.seed["seed_key"], "target_index": item.target_index,
        "prompt_version": version, "model_id": model_id, "sampling_params": canonical_json(sampling).decode(),
        "raw_response": error or result.get("raw_response"), "instruction": first["instruction"],
        "rejection": rejection.value if rejection else None, "geometry_delta": None,
        "prompt_tokens": result.get("prompt_tokens"), "completion_tokens": result.get("completion_tokens"),
        "latency_s": result.get("latency_s"), "attempts": result.get("attempts") or 1, **seed_fields(item.seed),
    }
