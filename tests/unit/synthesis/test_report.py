"""The run report: counts for every outcome and a few examples of each."""

from __future__ import annotations

from tests.helpers.synthesis_reference import outcomes
from dualview_core.synthesis.report import EXAMPLES_PER_REASON, render_report


def rec(i: int, rejection: str | None) -> dict:
    return {"query_id": f"q{i}", "query": f"query {i}", "original_instruction": "Old | one.", "rejection": rejection,
            "instruction": None if rejection else f"New {i}.", "raw_response": f"raw {i}"}


def test_report_counts_and_examples():
    records = [rec(i, None) for i in range(5)] + [rec(10, "chatter"), rec(11, "prompt_too_long")]
    text = render_report(records, outcomes(records), prompt_version="p1", model_id="m")
    assert "| accepted | 5 |" in text and "| rejected: chatter | 1 |" in text and "| **total** | 7 |" in text
    assert "## Rejected: prompt_too_long" in text and "| q11 | query 11 | Old \\| one. | raw 11 |" in text
    assert sum(line.startswith("| q") and "New" in line for line in text.splitlines()) == EXAMPLES_PER_REASON


def test_reply_lengths_give_what_sizing_max_tokens_needs():
    from dualview_core.synthesis.report import reply_lengths

    counts = {n: 1 for n in range(1, 101)}  # one reply of each length 1..100
    assert reply_lengths(counts, 100) == {"replies": 100, "p50": 50, "p90": 90, "p99": 99, "max": 100, "at_limit": 1,
                                          "max_tokens": 100}
    assert reply_lengths({30: 9, 64: 1}, 64) == {"replies": 10, "p50": 30, "p90": 30, "p99": 64, "max": 64,
                                                 "at_limit": 1, "max_tokens": 64}
    assert reply_lengths({}, 64) == {"replies": 0}


def test_a_run_without_content_filtering_still_says_what_each_guard_would_have_rejected():
    records = [rec(i, None) for i in range(3)]
    counts = outcomes(records) | {"filtering": "none", "guard_verdicts": {"too_long": 2, "meta": 1},
                                  "reply_tokens": {"replies": 3, "p50": 300, "p90": 410, "p99": 410, "max": 410,
                                                   "at_limit": 0, "max_tokens": 2048}}
    text = render_report(records, counts, prompt_version="p1", model_id="m", prompt="paper")
    assert "prompt `paper` version `p1`, model `m`, filtering `none`" in text
    assert "| content guard | answers it flags |" in text and "| too_long | 2 |" in text
    assert "the guards reject nothing: these rows were kept" in text
    assert "median 300, p90 410, p99 410, longest 410; 0 reached max_tokens (2048)" in text
    guarded = render_report(records, counts | {"filtering": "guards"}, prompt_version="p1", model_id="m")
    assert "the guards reject what they flag" in guarded
