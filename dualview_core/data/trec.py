"""TREC run and qrels files: reading them strictly, writing them exactly.

Owns the two text formats every IR tool speaks, so any system's output can be scored here:

- run:   `query_id Q0 doc_id rank score tag` (six whitespace-separated columns);
- qrels: `query_id iteration doc_id relevance` (four columns), or three (`query_id doc_id
  relevance`, BEIR's TSV, whose `query-id corpus-id score` header line is skipped).

A malformed line is an error naming the file and the 1-based line: wrong column count, a score
that is not a finite number, a relevance that is not an integer, a repeated (query, doc) pair, or a
query id the qrels do not know. Blank lines are skipped. Nothing is silently repaired.

Writing sorts each query by (score, doc_id) descending, trec_eval's own order, and prints scores
with `repr`, which round-trips a float exactly, so a run scores the same before and after a file.
It knows nothing about encoders, metrics or eval sets.

    >>> format_run_line("q1", "d7", 1, 0.5, "dualview")
    'q1 Q0 d7 1 0.5 dualview'
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator

import fsspec

from dualview_core.contracts import Qrels, Run
from dualview_core.data.sources import SourceError
from dualview_core.storage.filesystems import storage_defaults

BEIR_HEADER = ("query-id", "corpus-id", "score")
_BAD_ID = re.compile(r"^$|\s")  # empty, or whitespace anywhere: either would shift the columns


class TrecFormatError(SourceError):
    """A run or qrels file that cannot be used as it is; the message names the file and line."""


def _lines(path: str, storage_options: dict | None) -> Iterator[tuple[int, list[str]]]:
    try:
        with fsspec.open(path, "rt", encoding="utf-8", **storage_defaults(path, storage_options)) as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    yield number, line.split()
    except FileNotFoundError as exc:
        raise TrecFormatError(f"{path}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise TrecFormatError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    except (OSError, ValueError) as exc:
        raise TrecFormatError(f"{path}: unreadable ({exc})") from exc


def _check_known(path: str, number: int, query_id: str, known: Collection[str] | None, label: str) -> None:
    if known is not None and query_id not in known:
        raise TrecFormatError(f"{path}:{number}: unknown query id {query_id!r} (not in {label})")


def read_run(path: str, known_queries: Collection[str] | None = None, known_label: str = "the qrels",
             storage_options: dict | None = None) -> Run:
    """A TREC run file -> {query_id: {doc_id: score}}. `known_queries`, when given, is the set of
    query ids a line may name (usually the qrels' queries); `known_label` says where they came from."""
    run: Run = {}
    for number, cols in _lines(path, storage_options):
        if len(cols) != 6:
            raise TrecFormatError(f"{path}:{number}: expected 6 columns (query_id Q0 doc_id rank score tag), got {len(cols)}")
        query_id, _, doc_id, rank, score, _ = cols
        _check_known(path, number, query_id, known_queries, known_label)
        if not rank.lstrip("-").isdigit():
            raise TrecFormatError(f"{path}:{number}: rank {rank!r} is not an integer")
        value = _finite(path, number, score)
        docs = run.setdefault(query_id, {})
        if doc_id in docs:
            raise TrecFormatError(f"{path}:{number}: document {doc_id!r} repeats for query {query_id!r}")
        docs[doc_id] = value
    if not run:
        raise TrecFormatError(f"{path}: empty run (no lines)")
    return run


def _finite(path: str, number: int, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TrecFormatError(f"{path}:{number}: score {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TrecFormatError(f"{path}:{number}: score {text!r} is not finite")
    return value


def _relevance(path: str, number: int, text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise TrecFormatError(f"{path}:{number}: relevance {text!r} is not a number") from None
    if not value.is_integer():
        raise TrecFormatError(f"{path}:{number}: relevance {text!r} is not an integer")
    return int(value)


def read_qrels(path: str, storage_options: dict | None = None) -> Qrels:
    """A TREC (4 columns) or BEIR TSV (3 columns) qrels file -> {query_id: {doc_id: relevance}}."""
    qrels: Qrels = {}
    width = None  # the first judgement decides TREC (4) or BEIR (3); a file never mixes them
    for number, cols in _lines(path, storage_options):
        if len(cols) == 3 and number == 1 and tuple(c.lower() for c in cols) == BEIR_HEADER:
            continue
        width = width or (len(cols) if len(cols) in (3, 4) else 4)
        if len(cols) != width:
            layout = "query_id 0 doc_id relevance" if width == 4 else "query_id doc_id relevance, as above"
            raise TrecFormatError(f"{path}:{number}: expected {width} columns ({layout}), got {len(cols)}")
        query_id, doc_id, rel = (cols[0], cols[2], cols[3]) if width == 4 else cols
        docs = qrels.setdefault(query_id, {})
        if doc_id in docs:
            raise TrecFormatError(f"{path}:{number}: document {doc_id!r} judged twice for query {query_id!r}")
        docs[doc_id] = _relevance(path, number, rel)
    if not qrels:
        raise TrecFormatError(f"{path}: empty qrels (no lines)")
    return qrels


def ranked(docs: dict[str, float]) -> list[tuple[str, float]]:
    """One query's run in trec_eval's order: score descending, ties by doc_id descending."""
    return sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)


def format_run_line(query_id: str, doc_id: str, rank: int, score: float, tag: str) -> str:
    return f"{query_id} Q0 {doc_id} {rank} {score!r} {tag}"


def write_run(path: str, run: Run, tag: str = "dualview", storage_options: dict | None = None) -> None:
    for name in (tag, *run, *(d for docs in run.values() for d in docs)):
        if _BAD_ID.search(name):
            raise ValueError(f"TREC ids and tags cannot be empty or contain whitespace: {name!r}")
    with fsspec.open(path, "wt", encoding="utf-8", **storage_defaults(path, storage_options)) as f:
        for query_id in sorted(run):
            for rank, (doc_id, score) in enumerate(ranked(run[query_id]), start=1):
                f.write(format_run_line(query_id, doc_id, rank, float(score), tag) + "\n")


def write_qrels(path: str, qrels: Qrels, storage_options: dict | None = None) -> None:
    with fsspec.open(path, "wt", encoding="utf-8", **storage_defaults(path, storage_options)) as f:
        for query_id in sorted(qrels):
            for doc_id, rel in sorted(qrels[query_id].items()):
                f.write(f"{query_id} 0 {doc_id} {int(rel)}\n")
