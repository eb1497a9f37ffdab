"""The data contracts: every Arrow schema that crosses a stage boundary, and the small typed records.

This module owns the *shape* of data. It knows nothing about files, formats, engines or services.
Every read validates against these schemas (`conform`), every write goes through them.

Vocabulary: `query`, `instruction`, `doc`, `query_id`, `doc_id`, `positive(s)`, `negatives`,
`instruction_negatives`, `dual_view`. Promptriever's published column names are translated at the
loader edge (`only_query` -> `query`, `only_instruction` -> `instruction`, `new_negatives` ->
`instruction_negatives`, `docid` -> `doc_id`) and never travel further.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import pyarrow as pa

# --- passages -----------------------------------------------------------------------------------

PASSAGE = pa.struct(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
    ]
)
PASSAGES = pa.list_(PASSAGE)


@dataclass(frozen=True, slots=True)
class Passage:
    doc_id: str
    title: str
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"doc_id": self.doc_id, "title": self.title, "text": self.text}


# --- seeds --------------------------------------------------------------------------------------

SEED_ROW = pa.schema(
    [
        pa.field("seed_key", pa.string(), nullable=False),  # content hash, see keys.seed_key
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("query", pa.string(), nullable=False),  # the pure query, without instruction
        pa.field("instruction", pa.string(), nullable=False),  # "" when has_instruction is false
        pa.field("has_instruction", pa.bool_(), nullable=False),
        pa.field("positives", PASSAGES, nullable=False),
        pa.field("negatives", PASSAGES, nullable=False),
        pa.field("instruction_negatives", PASSAGES, nullable=False),
    ],
    metadata={"contract": "SeedRow/1"},
)


# --- synthesis ----------------------------------------------------------------------------------

# What an engine returns per staged row (tasks/synthesis/engines.py): `synthesis.EngineResult`'s fields, in order.
ENGINE_RESULT = pa.schema(
    [
        pa.field("cache_key", pa.string(), nullable=False),
        pa.field("raw_response", pa.string(), nullable=True),  # None when the engine failed for the row
        pa.field("prompt_tokens", pa.int64(), nullable=True),
        pa.field("completion_tokens", pa.int64(), nullable=True),
        pa.field("latency_s", pa.float64(), nullable=True),
        pa.field("attempts", pa.int64(), nullable=False),
        pa.field("error", pa.string(), nullable=True),
    ],
    metadata={"contract": "EngineResult/1"},
)

SYNTHESIS_RECORD = pa.schema(
    [
        pa.field("cache_key", pa.string(), nullable=False),  # (seed_key, prompt, model, sampling)
        pa.field("seed_key", pa.string(), nullable=False),
        pa.field("target_index", pa.int32(), nullable=False),  # which instruction negative is N*
        pa.field("prompt_version", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("sampling_params", pa.string(), nullable=False),  # canonical JSON
        pa.field("raw_response", pa.string(), nullable=True),
        pa.field("instruction", pa.string(), nullable=True),  # the parsed I_new, if accepted
        pa.field("rejection", pa.string(), nullable=True),  # a Rejection value, if rejected
        pa.field("geometry_delta", pa.float32(), nullable=True),
        pa.field("prompt_tokens", pa.int32(), nullable=True),
        pa.field("completion_tokens", pa.int32(), nullable=True),
        pa.field("latency_s", pa.float32(), nullable=True),
        pa.field("attempts", pa.int32(), nullable=False),  # 0: rejected before the engine (prompt_too_long)
        # Version 2: the seed a person needs to read a record. Null in version-1 shards (the cache
        # keeps them); the run fills them from the seed the cache key names when it writes outputs.
        pa.field("query_id", pa.string(), nullable=True),
        pa.field("query", pa.string(), nullable=True),
        pa.field("original_instruction", pa.string(), nullable=True),
        # Version 3: what the model wrote before its answer block (its reasoning, <think> included),
        # and the first content guard the parsed instruction breaks, whatever the run's filtering
        # policy (null: it breaks none, or there is no instruction).
        pa.field("reasoning", pa.string(), nullable=True),
        pa.field("guard", pa.string(), nullable=True),
    ],
    metadata={"contract": "SynthesisRecord/3"},
)
SYNTHESIS_RECORD_V2_COLUMNS = ("query_id", "query", "original_instruction")
SYNTHESIS_RECORD_V3_COLUMNS = ("reasoning", "guard")

DUAL_VIEW_ROW = pa.schema(
    [
        pa.field("dual_view_key", pa.string(), nullable=False),
        pa.field("seed_key", pa.string(), nullable=False),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("query", pa.string(), nullable=False),
        pa.field("instruction", pa.string(), nullable=False),  # I_new
        pa.field("original_instruction", pa.string(), nullable=False),
        pa.field("positive", PASSAGE, nullable=False),  # N*
        pa.field("instruction_negatives", PASSAGES, nullable=False),  # [P+] + the other N_i, old positive first
        pa.field("negatives", PASSAGES, nullable=False),  # the seed's ordinary negatives
        pa.field("prompt_version", pa.string(), nullable=False),
        pa.field("model_id", pa.string(), nullable=False),
    ],
    metadata={"contract": "DualViewRow/2"},
)

# --- evaluation sets ----------------------------------------------------------------------------


class View(StrEnum):
    """Which instruction a query is asked under. FollowIR uses og/changed; InfoSearch adds reversed
    and a bare query (none); MAIR and InstructIR use og only."""

    OG = "og"
    CHANGED = "changed"
    REVERSED = "reversed"
    NONE = "none"


EVAL_CORPUS = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
    ],
    metadata={"contract": "EvalCorpus/1"},
)

EVAL_QUERIES = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),  # InstructIR variants share a group
        pa.field("view", pa.string(), nullable=False),  # a View value
        pa.field("query", pa.string(), nullable=False),
        pa.field("instruction", pa.string(), nullable=False),
    ],
    metadata={"contract": "EvalQueries/1"},
)

EVAL_QRELS = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("view", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("relevance", pa.int32(), nullable=False),
    ],
    metadata={"contract": "EvalQrels/1"},
)

EVAL_TOP_RANKED = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("doc_ids", pa.list_(pa.string()), nullable=False),
    ],
    metadata={"contract": "EvalTopRanked/1"},
)

Qrels = dict[str, dict[str, int]]  # query_id -> doc_id -> relevance (pytrec_eval's shape)
Run = dict[str, dict[str, float]]  # query_id -> doc_id -> score (pytrec_eval's shape)


@dataclass(frozen=True)
class EvalSet:
    """One benchmark subset (e.g. FollowIR Core17) in the project's long format."""

    name: str
    corpus: pa.Table  # EVAL_CORPUS
    queries: pa.Table  # EVAL_QUERIES
    qrels: pa.Table  # EVAL_QRELS
    top_ranked: pa.Table | None = None  # EVAL_TOP_RANKED; None means rank the whole corpus
    meta: dict[str, str] = field(default_factory=dict)

    def views(self) -> list[str]:
        return sorted(set(self.queries.column("view").to_pylist()))

    def qrels_for(self, view: str) -> Qrels:
        out: Qrels = {}
        for row in self.qrels.to_pylist():
            if row["view"] == view:
                out.setdefault(row["query_id"], {})[row["doc_id"]] = row["relevance"]
        return out

    def queries_for(self, view: str) -> dict[str, tuple[str, str]]:
        """query_id -> (query, instruction) under one view."""
        return {
            r["query_id"]: (r["query"], r["instruction"])
            for r in self.queries.to_pylist()
            if r["view"] == view
        }

    def candidates(self) -> dict[str, list[str]] | None:
        if self.top_ranked is None:
            return None
        return {r["query_id"]: r["doc_ids"] for r in self.top_ranked.to_pylist()}


# --- quarantine ---------------------------------------------------------------------------------


class Reason(StrEnum):
    """Why an input row was quarantined. Values are stable: they are counted and stored."""

    UNDECODABLE = "undecodable_text"
    MALFORMED = "malformed_record"  # not a JSON object / not a mapping at all
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    EMPTY_TEXT = "empty_text"
    NO_POSITIVE = "no_positive"
    PASSAGE_TOO_LONG = "passage_too_long"
    INSTRUCTION_NEGATIVE_IS_POSITIVE = "instruction_negative_is_positive"
    DUPLICATE_ID = "duplicate_id"
    UNKNOWN_REFERENCE = "unknown_reference"  # eval sets: qrels/top-ranked naming a missing id


# One per seed source row, from a synthesis run's first pass to its driver (dualview_core/synthesis/plan.py):
# what only the whole source decides is decided from these, never from the rows themselves.
PLAN_ROW = pa.schema(
    [
        pa.field("locator", pa.int64(), nullable=False),  # chunk << 32 | row in chunk (dualview_core.data.chunks)
        pa.field("reason", pa.string(), nullable=True),  # a Reason value: quarantined; null: valid
        pa.field("identity", pa.binary(12), nullable=True),  # valid rows: 96-bit digest of (query_id, has_instruction)
        pa.field("instruct", pa.bool_(), nullable=True),  # valid rows: has_instruction
        pa.field("negatives", pa.bool_(), nullable=True),  # valid rows: has instruction negatives
        pa.field("query_id", pa.string(), nullable=True),  # synthesis seeds only (null for other rows)
        pa.field("seed_key", pa.string(), nullable=True),
        pa.field("calls", pa.int32(), nullable=True),  # the calls the seed asks for (targets)
        pa.field("staged", pa.list_(pa.string()), nullable=True),  # keys of calls not cached, staged for the engine
        pa.field("recorded", pa.list_(pa.string()), nullable=True),  # keys recorded without the engine (too long)
    ],
    metadata={"contract": "PlanRow/1"},
)

QUARANTINE = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("row_index", pa.int64(), nullable=False),  # 0-based position in the source
        pa.field("query_id", pa.string(), nullable=True),
        pa.field("reason", pa.string(), nullable=False),  # a Reason value
        pa.field("detail", pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),  # the row as best-effort JSON
    ],
    metadata={"contract": "Quarantine/1"},
)


@dataclass(frozen=True, slots=True)
class Rejected:
    row_index: int
    query_id: str | None
    reason: Reason
    detail: str
    raw: str


# --- conformance --------------------------------------------------------------------------------


class ContractError(ValueError):
    """Data does not match its declared schema."""


def upgrade_synthesis_record(table: pa.Table) -> pa.Table:
    """A SynthesisRecord/1 or /2 table with the later versions' columns added as nulls (a no-op on
    version 3), so answers paid for under an old contract stay in the cache. Conform the result as
    usual. (An old record's guard verdict is in its rejection; `records.under_policy` reads it there.)"""
    for name in SYNTHESIS_RECORD_V2_COLUMNS + SYNTHESIS_RECORD_V3_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, SYNTHESIS_RECORD.field(name).type))
    return table


def conform(table: pa.Table, schema: pa.Schema, what: str = "table") -> pa.Table:
    """Return `table` with exactly `schema`'s columns, order and types, or raise ContractError.

    Extra columns are dropped; a missing column or an impossible cast is an error; nulls in a
    non-nullable column are an error (Arrow's cast does not check nullability itself).
    """
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ContractError(f"{what}: missing column(s) {missing} for {schema.metadata}")
    columns = []
    for f in schema:
        col = table.column(f.name)
        try:
            col = col.cast(f.type) if not col.type.equals(f.type) else col
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ContractError(f"{what}: column {f.name!r} is {col.type}, expected {f.type}") from exc
        if not f.nullable and col.null_count:
            raise ContractError(f"{what}: column {f.name!r} has {col.null_count} null(s)")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)
