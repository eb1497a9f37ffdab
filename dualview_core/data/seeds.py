"""Seed rows: Promptriever's published columns in, validated `SeedRow`s or quarantined rows out.

Owns the translation of one raw row into the project's vocabulary, every validity rule, the content
key, and streaming validation with the reconciliation `rows = valid + quarantined`. It does not know
where rows come from (see `sources`) or where they go (see `io`).

Published Promptriever columns (their names stop at this module):

    query_id, query (= query + " " + instruction), only_query, only_instruction, has_instruction,
    positive_passages, negative_passages, new_negatives      # passages: {docid, title, text, ...}

Rows already in the project's own SeedRow columns are accepted as well (e.g. a previous run's output).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from dualview_core.config import ValidationConfig
from dualview_core.contracts import SEED_ROW, Reason, Rejected
from dualview_core.data.id_set import IdSet
from dualview_core.keys import canonical_json, seed_key
from dualview_core.data.sources import RawRow

# published column -> project column; the project's own names map to themselves
PROMPTRIEVER_COLUMNS = {
    "query_id": "query_id",
    "only_query": "query",
    "only_instruction": "instruction",
    "has_instruction": "has_instruction",
    "positive_passages": "positives",
    "negative_passages": "negatives",
    "new_negatives": "instruction_negatives",
}
OWN_COLUMNS = {name: name for name in PROMPTRIEVER_COLUMNS.values()}
OPTIONAL = {"instruction_negatives"}  # null/missing in published non-instruct rows
PASSAGE_LISTS = ("positives", "negatives", "instruction_negatives")


class Invalid(Exception):
    def __init__(self, reason: Reason, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _text(value: object, where: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise Invalid(Reason.WRONG_TYPE, f"{where} is {type(value).__name__}, expected string")
    if not value.isascii() and ("\ufffd" in value or _has_surrogate(value)):  # ASCII holds neither
        raise Invalid(Reason.UNDECODABLE, f"{where} holds undecodable characters")
    if not allow_empty and (not value or value.isspace()):  # as `not value.strip()`, without a copy
        raise Invalid(Reason.EMPTY_TEXT, f"{where} is empty")
    return value


def _has_surrogate(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _passage(value: object, where: str, max_chars: int) -> dict[str, str]:
    if not isinstance(value, dict):
        raise Invalid(Reason.WRONG_TYPE, f"{where} is {type(value).__name__}, expected an object")
    doc_id = value.get("doc_id", value.get("docid"))
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)  # MS MARCO ids are numeric in some dumps
    if doc_id is None:
        raise Invalid(Reason.MISSING_FIELD, f"{where}.docid is missing")
    title = value.get("title") or ""
    text = value.get("text")
    if text is None:
        raise Invalid(Reason.MISSING_FIELD, f"{where}.text is missing")
    passage = {
        "doc_id": _text(doc_id, f"{where}.docid"),
        "title": _text(title, f"{where}.title", allow_empty=True),
        "text": _text(text, f"{where}.text"),
    }
    if len(passage["text"]) > max_chars:
        raise Invalid(Reason.PASSAGE_TOO_LONG, f"{where} has {len(passage['text'])} chars > {max_chars}")
    return passage


def _passages(value: object, where: str, max_chars: int) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise Invalid(Reason.WRONG_TYPE, f"{where} is {type(value).__name__}, expected a list")
    return [_passage(p, f"{where}[{i}]", max_chars) for i, p in enumerate(value)]


def normalize(raw: object, cfg: ValidationConfig) -> dict:
    """One raw row -> a SEED_ROW dict (with `seed_key`), or raise Invalid with the first problem."""
    if not isinstance(raw, Mapping):  # dicts, and row views such as HF datasets' lazy rows
        raise Invalid(Reason.MALFORMED, f"row is {type(raw).__name__}, expected an object")
    names = OWN_COLUMNS if "positives" in raw else PROMPTRIEVER_COLUMNS
    row: dict = {}
    for source, target in names.items():
        value = raw.get(source)
        if value is None and target not in OPTIONAL:
            raise Invalid(Reason.MISSING_FIELD, f"{source} is missing")
        row[target] = value
    query_id = row["query_id"]
    if isinstance(query_id, int) and not isinstance(query_id, bool):
        row["query_id"] = str(query_id)
    row["query_id"] = _text(row["query_id"], "query_id")
    if not isinstance(row["has_instruction"], bool):
        raise Invalid(Reason.WRONG_TYPE, f"has_instruction is {type(row['has_instruction']).__name__}, expected bool")
    row["query"] = _text(row["query"], "query")
    if len(row["query"]) > cfg.max_query_chars:
        raise Invalid(Reason.PASSAGE_TOO_LONG, f"query has {len(row['query'])} chars > {cfg.max_query_chars}")
    row["instruction"] = _text(row["instruction"], "instruction", allow_empty=not row["has_instruction"])
    if row["instruction_negatives"] is None:
        row["instruction_negatives"] = []
    for name in PASSAGE_LISTS:
        row[name] = _passages(row[name], name, cfg.max_passage_chars)
    if not row["positives"]:
        raise Invalid(Reason.NO_POSITIVE, "positives is empty")
    _check_instruction_negatives(row)
    row["seed_key"] = seed_key(row)
    return row


def _check_instruction_negatives(row: dict) -> None:
    positive_ids = {p["doc_id"] for p in row["positives"]}
    positive_texts = {" ".join(p["text"].split()) for p in row["positives"]}
    for i, neg in enumerate(row["instruction_negatives"]):
        if neg["doc_id"] in positive_ids or " ".join(neg["text"].split()) in positive_texts:
            raise Invalid(
                Reason.INSTRUCTION_NEGATIVE_IS_POSITIVE,
                f"instruction_negatives[{i}] ({neg['doc_id']}) is the positive",
            )


def _raw_json(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return canonical_json(value).decode("utf-8", errors="replace")
    except (TypeError, ValueError, UnicodeEncodeError):
        return repr(value)


@dataclass
class ValidationReport:
    """Running counts. Invariant: rows == valid + quarantined."""

    rows: int = 0
    valid: int = 0
    quarantined: int = 0
    by_reason: Counter = field(default_factory=Counter)
    instruct: int = 0
    non_instruct: int = 0
    with_instruction_negatives: int = 0  # valid instruct rows eligible for synthesis

    def count(self, result: dict | Rejected) -> None:
        """Count one validated row (a SEED_ROW dict) or quarantined one."""
        self.rows += 1
        if isinstance(result, Rejected):
            self.quarantined += 1
            self.by_reason[result.reason.value] += 1
        elif result["has_instruction"]:
            self.valid += 1
            self.instruct += 1
            self.with_instruction_negatives += bool(result["instruction_negatives"])
        else:
            self.valid += 1
            self.non_instruct += 1

    def as_dict(self) -> dict:
        return {
            "rows": self.rows,
            "valid": self.valid,
            "quarantined": self.quarantined,
            "by_reason": dict(sorted(self.by_reason.items())),
            "instruct": self.instruct,
            "non_instruct": self.non_instruct,
            "with_instruction_negatives": self.with_instruction_negatives,
        }


def validate(raw: RawRow, cfg: ValidationConfig) -> dict | Rejected:
    """One raw row on its own: a SEED_ROW dict (with `seed_key`), or why it is quarantined. Every rule
    but `duplicate_id`, which needs the rows before it (`SeedValidator`, `dualview_core.synthesis.plan`)."""
    try:
        if raw.problem:
            raise Invalid(*raw.problem)
        return normalize(raw.value, cfg)
    except Invalid as bad:
        return rejected(raw, bad.reason, bad.detail)


def rejected(raw: RawRow, reason: Reason, detail: str) -> Rejected:
    query_id = raw.value.get("query_id") if isinstance(raw.value, Mapping) else None
    return Rejected(raw.index, None if query_id is None else str(query_id), reason, detail, _raw_json(raw.value))


def identity(row: Mapping) -> str:
    """What a duplicate repeats: (query_id, has_instruction). Promptriever's instruct row and its
    non-instruct counterpart share a query_id, which is how the All-orig mixture pairs them."""
    return f"{row['query_id']}\x1f{int(row['has_instruction'])}"


def duplicate(row: Mapping) -> tuple[Reason, str]:
    return Reason.DUPLICATE_ID, f"query_id {row['query_id']} repeats (has_instruction={row['has_instruction']})"


class SeedValidator:
    """Validates a stream of raw rows; remembers identities across batches to catch duplicates (the
    first valid row of an identity is kept, later ones are quarantined)."""

    def __init__(self, cfg: ValidationConfig | None = None):
        self.cfg = cfg or ValidationConfig()
        self.report = ValidationReport()
        self._seen = IdSet()  # every valid row's identity, compactly: millions of rows pass through

    def check(self, raw: RawRow) -> dict | Rejected:
        result = validate(raw, self.cfg)
        if not isinstance(result, Rejected) and not self._seen.add(identity(result)):  # nothing after this rejects
            result = rejected(raw, *duplicate(result))
        self.report.count(result)
        return result

    def batches(self, raw_batches: Iterable[list[RawRow]]) -> Iterator[tuple[pa.Table, list[Rejected]]]:
        """(valid rows as a SEED_ROW table, rejected rows) per input batch."""
        raw_batches = iter(raw_batches)
        while True:
            with acyclic():  # reading a batch into Python rows, validating them, back to Arrow
                batch = next(raw_batches, None)
                if batch is None:
                    return
                valid, rejected = [], []
                for raw in batch:
                    result = self.check(raw)
                    (rejected if isinstance(result, Rejected) else valid).append(result)
                table = pa.Table.from_pylist(valid, schema=SEED_ROW)
            yield table, rejected


@contextmanager
def acyclic() -> Iterator[None]:
    """Inside: the cycle collector is paused. For work that makes only acyclic objects (rows of
    dicts, lists and strings, freed by reference counting), which would otherwise set it off every
    few hundred rows to walk the whole heap. A third of validation's time at 20k rows."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def is_synthesis_seed(row: dict) -> bool:
    """The paper's seed rule: an instruct row with at least one instruction negative."""
    return row["has_instruction"] and len(row["instruction_negatives"]) > 0


def select_synthesis_seeds(table: pa.Table) -> pa.Table:
    """Rows of a SEED_ROW table that polarity reversal can use."""
    mask = pc.and_(table.column("has_instruction"), pc.greater(pc.list_value_length(table.column("instruction_negatives")), 0))
    return table.filter(mask)
