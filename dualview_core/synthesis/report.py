"""The run report a person reads: counts, then a few accepted and rejected examples per reason.

Takes the current items' final records (SynthesisRecord/2 dicts, seed columns filled) and the
run's counts; returns Markdown. It does not know where the report is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

EXAMPLES_PER_REASON = 3
MAX_CELL_CHARS = 240


def _cell(text: str | None) -> str:
    text = " ".join((text or "").split()).replace("|", "\\|")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def _examples(records: list[Mapping], answer_column: str) -> list[str]:
    lines = [f"| query_id | query | original instruction | {answer_column} |", "|---|---|---|---|"]
    for r in records[:EXAMPLES_PER_REASON]:
        answer = r["instruction"] if answer_column == "new instruction" else r["raw_response"]
        lines.append(f"| {_cell(r['query_id'])} | {_cell(r['query'])} | {_cell(r['original_instruction'])} | {_cell(answer)} |")
    return lines


def render_report(records: Iterable[Mapping], counts: Mapping, *, prompt_version: str, model_id: str) -> str:
    """Markdown: the outcome counts, then up to EXAMPLES_PER_REASON examples of each outcome."""
    by_reason: dict[str, list[Mapping]] = {}
    for r in records:
        by_reason.setdefault(r["rejection"] or "accepted", []).append(r)
    lines = ["# Synthesis report", "", f"prompt version `{prompt_version}`, model `{model_id}`", "",
             "| outcome | rows |", "|---|---|", f"| accepted | {counts['accepted']} |"]
    lines += [f"| rejected: {reason} | {n} |" for reason, n in counts["by_reason"].items()]
    lines += [f"| **total** | {counts['accepted'] + counts['rejected']} |", ""]
    if by_reason.get("accepted"):
        lines += ["## Accepted", "", *_examples(by_reason["accepted"], "new instruction"), ""]
    for reason in sorted(k for k in by_reason if k != "accepted"):
        column = "new instruction" if reason in ("unverified", "geometry") else "raw response"
        lines += [f"## Rejected: {reason}", "", *_examples(by_reason[reason], column), ""]
    return "\n".join(lines)
