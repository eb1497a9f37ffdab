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
