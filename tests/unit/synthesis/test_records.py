"""Synthesis bookkeeping: cache keys, plans against a cache and a previous run, records, costs."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dualview_core.contracts import SYNTHESIS_RECORD, conform
from dualview_core.method.parsing import Parsed, Rejection
from dualview_core.data.seeds import SeedValidator
from dualview_core.data.sources import RawRow
from dualview_core.synthesis.records import CostSummary, EngineResult, WorkItem, cache_key, record
from tests.helpers.synthesis_reference import is_final, plan
from tests.helpers.factories import promptriever_row

SAMPLING = {"temperature": 0.0, "max_tokens": 64}
ASK = {"prompt_version": "v1", "model_id": "m", "sampling": SAMPLING}


def seed(query_id: str, n_inst_neg: int = 2, text: str | None = None) -> dict:
    raw = promptriever_row(query_id, n_inst_neg=n_inst_neg)
    if text:
        raw["positive_passages"][0]["text"] = text
    return SeedValidator().check(RawRow(0, raw))


def test_cache_key_covers_every_ingredient():
    base = cache_key("s", 0, "v1", "m", SAMPLING)
    variants = [cache_key("t", 0, "v1", "m", SAMPLING), cache_key("s", 1, "v1", "m", SAMPLING),
                cache_key("s", 0, "v2", "m", SAMPLING), cache_key("s", 0, "v1", "n", SAMPLING),
                cache_key("s", 0, "v1", "m", {**SAMPLING, "temperature": 0.7})]
    assert len({base, *variants}) == 6
    assert base == cache_key("s", 0, "v1", "m", dict(reversed(list(SAMPLING.items()))))


def test_one_target_per_seed_or_one_per_instruction_negative():
    seeds = [seed("a", 3), seed("b", 1)]
    one = plan(seeds, set(), {}, per_negative=False, **_plan_args())
    each = plan(seeds, set(), {}, per_negative=True, **_plan_args())
    assert [(i.seed["query_id"], i.target_index) for i in one.pending] == [("a", 0), ("b", 0)]
    assert [(i.seed["query_id"], i.target_index) for i in each.pending] == [("a", 0), ("a", 1), ("a", 2), ("b", 0)]


def _plan_args() -> dict:
    return {"prompt_version": "v1", "model_id": "m", "sampling": SAMPLING}


def test_plan_sends_only_what_is_not_cached_and_diffs_the_seed_set():
    before = [seed("a"), seed("b"), seed("c")]
    first = plan(before, set(), {}, per_negative=False, **_plan_args())
    assert first.counts() == {"pending": 3, "cached": 0, "new": 3, "changed": 0, "removed": 0, "unchanged": 0}
    cached = {i.cache_key for i in first.pending}
    after = [seed("a"), seed("b", text="Edited positive."), seed("d")]  # c removed, b changed, d new
    second = plan(after, cached, first.seeds, per_negative=False, **_plan_args())
    assert second.counts() == {"pending": 2, "cached": 1, "new": 1, "changed": 1, "removed": 1, "unchanged": 1}
    assert sorted(i.seed["query_id"] for i in second.pending) == ["b", "d"]
    again = plan(after, cached | {i.cache_key for i in second.pending}, second.seeds, per_negative=False, **_plan_args())
    assert again.counts()["pending"] == 0 and again.counts()["unchanged"] == 3


def item() -> WorkItem:
    s = seed("a")
    return WorkItem(s, 0, cache_key(s["seed_key"], 0, "v1", "m", SAMPLING))


def test_record_fits_the_contract_and_keeps_the_answer():
    it = item()
    rec = record(it, EngineResult(it.cache_key, "<answer>…", 900, 20, 1.5, 2), Parsed("Only X.", None), **ASK)
    conform(pa.Table.from_pylist([rec], schema=SYNTHESIS_RECORD), SYNTHESIS_RECORD)
    assert (rec["instruction"], rec["rejection"], rec["attempts"], rec["sampling_params"]) == (
        "Only X.", None, 2, '{"max_tokens":64,"temperature":0.0}')
    assert is_final(rec)


def test_token_limit_and_engine_errors_are_rejections_and_errors_are_retried():
    it = item()
    cut = record(it, EngineResult(it.cache_key, "<answer><new_instruction>Only X and", 900, 64), Parsed("Only X and", None), **ASK)
    assert cut["rejection"] == Rejection.TRUNCATED and is_final(cut)
    failed = record(it, EngineResult(it.cache_key, None, attempts=4, error="ReadTimeout"), Parsed(None, Rejection.NO_ANSWER), **ASK)
    assert failed["rejection"] == Rejection.ENGINE_ERROR and failed["raw_response"] == "ReadTimeout"
    assert not is_final(failed)


def test_cost_summary_adds_up():
    it = item()
    costs = CostSummary()
    costs.add(record(it, EngineResult(it.cache_key, "r", 100, 10, 2.0), Parsed("Only X.", None), **ASK))
    costs.add(record(it, EngineResult(it.cache_key, "r", 120, 5, 1.0, 3), Parsed(None, Rejection.NONE), **ASK))
    out = costs.as_dict(wall_seconds=4.0)
    assert out["engine_rows"] == 2 and out["accepted"] == 1 and out["acceptance_rate"] == 0.5
    assert out["rejections"] == {"none": 1} and out["attempts"] == 4
    assert (out["prompt_tokens"], out["completion_tokens"], out["engine_seconds"]) == (220, 15, 3.0)
    assert out["rows_per_s"] == 0.5 and out["tokens_per_s"] == pytest.approx(235 / 4, abs=0.05)


def test_engine_errors_that_cannot_succeed_on_retry_are_final():
    from dualview_core.synthesis.records import error_rejection

    assert error_rejection("prompt_too_long: 2100 prompt tokens + 64 max_tokens > 2048 context") == Rejection.PROMPT_TOO_LONG
    assert error_rejection("ValueError: The decoder prompt (length 2500) is longer than the maximum model length of 2048.") \
        == Rejection.PROMPT_TOO_LONG
    assert error_rejection('RuntimeError: HTTP 400: {"message": "This model\'s maximum context length is 2048 tokens"}') \
        == Rejection.PROMPT_TOO_LONG
    assert error_rejection("RuntimeError: HTTP 404: no such model") == Rejection.INVALID_REQUEST
    assert error_rejection("ValueError: bad sampling params") == Rejection.INVALID_REQUEST
    for transient in ("ReadTimeout", "ConnectError", "HTTP 503", "engine returned no row", "RuntimeError: EngineDead"):
        assert error_rejection(transient) == Rejection.ENGINE_ERROR
    it = item()
    rec = record(it, EngineResult(it.cache_key, None, attempts=1, error="RuntimeError: HTTP 422: bad"), Parsed(None, None), **ASK)
    assert rec["rejection"] == Rejection.INVALID_REQUEST and is_final(rec)


def test_prompt_too_long_counts_the_answer_room():
    from dualview_core.synthesis.records import prompt_too_long

    assert prompt_too_long(1984, 64, 2048) is None
    assert prompt_too_long(1985, 64, 2048) == "prompt_too_long: 1985 prompt tokens + 64 max_tokens > 2048 context"


def test_transient_failures_are_retried_in_a_bounded_number_of_runs():
    from tests.helpers.synthesis_reference import final_records

    def failure(key, n):
        return {"cache_key": key, "rejection": "engine_error", "raw_response": f"ReadTimeout {n}"}

    ok = {"cache_key": "b", "rejection": None, "raw_response": "fine"}
    history = [failure("a", 1), failure("b", 1), ok, failure("a", 2)]
    assert set(final_records(history, 3)) == {"b"}  # a failed in 2 runs: retried again
    assert final_records(history + [failure("a", 3)], 3)["a"]["raw_response"] == "ReadTimeout 3"  # now final
    assert final_records(history + [failure("b", 2), failure("b", 3)], 3)["b"] is ok  # a success wins


def test_records_carry_the_seed_and_outcomes_reconcile():
    from tests.helpers.synthesis_reference import outcomes

    it = item()
    rec = record(it, EngineResult(it.cache_key, "<answer>…", 900, 20), Parsed("Only X.", None), **ASK)
    assert (rec["query_id"], rec["query"], rec["original_instruction"]) == (
        "a", "how do I store a seeds", "Only guidance for home gardeners is relevant.")
    recs = [rec, {**rec, "rejection": "chatter"}, {**rec, "rejection": "chatter"}, {**rec, "rejection": "prompt_too_long"}]
    assert outcomes(recs) == {"accepted": 1, "rejected": 3, "by_reason": {"chatter": 2, "prompt_too_long": 1}}


def test_rows_rejected_before_the_engine_cost_no_tokens_and_verification_is_counted():
    it = item()
    costs = CostSummary()
    costs.add(record(it, EngineResult(it.cache_key, None, 5000, attempts=0, error="prompt_too_long: …"), Parsed(None, None), **ASK))
    asked_now = {"rejection": None, "prompt_tokens": 300, "completion_tokens": 20}
    costs.add_verification_call(asked_now)
    costs.add_verdict(asked_now)
    costs.add_verdict({"rejection": "unverified", "prompt_tokens": 310, "completion_tokens": 22})  # cached
    out = costs.as_dict(wall_seconds=1.0)
    assert out["prompt_tokens"] == 0 and out["rejections"] == {"prompt_too_long": 1} and out["attempts"] == 0
    assert (out["verify_rows"], out["verify_prompt_tokens"], out["verify_completion_tokens"]) == (1, 300, 20)
    assert (out["verify_checked"], out["verify_failed"], out["verify_disagreement_rate"]) == (2, 1, 0.5)


def test_a_version_1_record_table_is_read_as_version_3():
    from dualview_core.contracts import SYNTHESIS_RECORD_V2_COLUMNS, SYNTHESIS_RECORD_V3_COLUMNS, upgrade_synthesis_record

    it = item()
    rec = record(it, EngineResult(it.cache_key, "<answer>…", 900, 20), Parsed("Only X.", None), **ASK)
    old = SYNTHESIS_RECORD_V2_COLUMNS + SYNTHESIS_RECORD_V3_COLUMNS
    v1 = pa.Table.from_pylist([{k: v for k, v in rec.items() if k not in old}])
    with pytest.raises(Exception, match="missing column"):
        conform(v1, SYNTHESIS_RECORD)
    [back] = conform(upgrade_synthesis_record(v1), SYNTHESIS_RECORD).to_pylist()
    assert back == {**rec, "query_id": None, "query": None, "original_instruction": None, "reasoning": None, "guard": None}
    assert SYNTHESIS_RECORD.metadata[b"contract"] == b"SynthesisRecord/3"


REASONED = ("Step 1: A is about home jars, B about silos.\nStep 4: A fails, B passes.\n"
            "<answer><new_instruction>Only industrial silo storage counts.</new_instruction></answer>")


@pytest.mark.parametrize("filtering, rejection", [("none", None), ("guards", "too_long"), ("verify", "too_long")])
def test_the_guard_verdict_is_stored_and_the_policy_decides_whether_it_rejects(filtering, rejection):
    it = item()
    rec = record(it, EngineResult(it.cache_key, REASONED, 900, 40), Parsed("Only industrial silo storage counts.", None),
                 guard=Rejection.TOO_LONG, filtering=filtering, **ASK)
    assert rec["guard"] == "too_long" and rec["rejection"] == rejection
    assert rec["reasoning"] == "Step 1: A is about home jars, B about silos.\nStep 4: A fails, B passes."
    assert rec["instruction"] == "Only industrial silo storage counts."  # never the reasoning
    conform(pa.Table.from_pylist([rec], schema=SYNTHESIS_RECORD), SYNTHESIS_RECORD)


def test_a_cached_record_reads_right_under_any_policy():
    from dualview_core.synthesis.records import guard_verdict, under_policy

    it = item()
    result = EngineResult(it.cache_key, REASONED, 900, 40)
    ok = Parsed("Only industrial silo storage counts.", None)
    judged = {p: record(it, result, ok, guard=Rejection.META, filtering=p, **ASK) for p in ("none", "guards")}
    for rec in judged.values():  # whichever policy judged it, each policy reads its own answer
        assert [under_policy(rec, p) for p in ("none", "guards", "verify")] == [None, "meta", "meta"]
    v2 = {**judged["guards"], "guard": None}  # a version-2 record: the verdict is in the rejection
    assert guard_verdict(v2) == "meta" and under_policy(v2, "none") is None
    # what is not the guards' doing stands under every policy
    for reason in ("no_answer", "none", "empty", "truncated", "engine_error", "prompt_too_long", "unverified"):
        bare = {"rejection": reason, "guard": None, "instruction": None}
        assert {under_policy(bare, p, g) for p in ("none", "guards") for g in (False, True)} == {reason}
    # an empty answer is the parser's verdict, never a guard's to waive (version 2 and 3 alike)
    empty = record(it, EngineResult(it.cache_key, "<answer><new_instruction></new_instruction></answer>", 900, 5),
                   Parsed(None, Rejection.EMPTY), filtering="none", **ASK)
    assert guard_verdict(empty) is None and under_policy(empty, "none") == "empty"
    cut = record(it, EngineResult(it.cache_key, REASONED, 900, 64), ok, guard=Rejection.META, filtering="none", **ASK)
    assert cut["rejection"] == "truncated" and under_policy(cut, "none") == "truncated"
    # waiving a guard does not waive the geometry filter when it is on; the filter off lets its rows back
    far = {**judged["guards"], "geometry_delta": -0.1}
    assert under_policy(far, "none", geometry=True) == "geometry" and under_policy(far, "none") is None
    assert under_policy(far, "guards", geometry=True) == "meta"  # the guard's verdict comes first
    moved = {**judged["none"], "guard": None, "rejection": "geometry", "geometry_delta": -0.1}
    assert under_policy(moved, "none", geometry=True) == "geometry" and under_policy(moved, "guards") is None
    clean = record(it, result, ok, filtering="guards", **ASK)
    assert clean["guard"] is None and {under_policy(clean, p) for p in ("none", "guards")} == {None}


def test_an_engine_failure_has_no_reasoning_or_guard():
    it = item()
    rec = record(it, EngineResult(it.cache_key, None, attempts=3, error="ReadTimeout"), Parsed(None, None),
                 guard=None, filtering="none", **ASK)
    assert (rec["rejection"], rec["reasoning"], rec["guard"]) == ("engine_error", None, None)
