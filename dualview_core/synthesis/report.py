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


def reply_lengths(counts: Mapping[int, int], max_tokens: int) -> dict:
    """The distribution of reply lengths in tokens (length -> replies), what sizing max_tokens needs:
    quantiles, the longest, and how many replies reached the limit (cut short)."""
    total = sum(counts.values())
    if not total:
        return {"replies": 0}
    out: dict = {"replies": total}
    seen, lengths = 0, sorted(counts)
    wanted = [(q, f"p{round(q * 100)}") for q in (0.5, 0.9, 0.99)]
    for n in lengths:
        seen += counts[n]
        while wanted and seen >= wanted[0][0] * total:
            out[wanted.pop(0)[1]] = n
    return out | {"max": lengths[-1], "at_limit": sum(c for n, c in counts.items() if n >= max_tokens),
                  "max_tokens": max_tokens}


def render_report(records: Iterable[Mapping], counts: Mapping, *, prompt_version: str, model_id: str,
                  prompt: str = "") -> str:
    """Markdown: the outcome counts, what each content guard said (whether or not the filtering
    policy let it reject), then up to EXAMPLES_PER_REASON examples of each outcome."""
    by_reason: dict[str, list[Mapping]] = {}
    for r in records:
        by_reason.setdefault(r["rejection"] or "accepted", []).append(r)
    named = f"prompt `{prompt}` " if prompt else "prompt "
    policy = f", filtering `{counts['filtering']}`" if counts.get("filtering") else ""
    lines = ["# Synthesis report", "", f"{named}version `{prompt_version}`, model `{model_id}`{policy}", "",
             "| outcome | rows |", "|---|---|", f"| accepted | {counts['accepted']} |"]
    lines += [f"| rejected: {reason} | {n} |" for reason, n in counts["by_reason"].items()]
    lines += [f"| **total** | {counts['accepted'] + counts['rejected']} |", ""]
    lengths = counts.get("reply_tokens") or {}
    if lengths.get("replies"):
        lines += [f"Reply length in tokens over {lengths['replies']} replies: median {lengths['p50']}, p90 "
                  f"{lengths['p90']}, p99 {lengths['p99']}, longest {lengths['max']}; {lengths['at_limit']} reached "
                  f"max_tokens ({lengths['max_tokens']}) and were cut short.", ""]
    if counts.get("guard_verdicts"):
        applied = counts.get("filtering", "guards") != "none"
        lines += ["| content guard | answers it flags |", "|---|---|"]
        lines += [f"| {reason} | {n} |" for reason, n in counts["guard_verdicts"].items()]
        lines += ["", "Under this run's filtering the guards " + ("reject what they flag, unless an earlier check (a "
                  "truncated reply) did." if applied else "reject nothing: these rows were kept."), ""]
    if by_reason.get("accepted"):
        lines += ["## Accepted", "", *_examples(by_reason["accepted"], "new instruction"), ""]
    for reason in sorted(k for k in by_reason if k != "accepted"):
        column = "new instruction" if reason in ("unverified", "geometry") else "raw response"
        lines += [f"## Rejected: {reason}", "", *_examples(by_reason[reason], column), ""]
    return "\n".join(lines)
