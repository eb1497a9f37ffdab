"""Contracts: conform() is the gate every read and write passes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dualview_core.contracts import EVAL_QRELS, QUARANTINE, SEED_ROW, ContractError, conform
from dualview_core.storage.tables import read_table, write_table
from dualview_core.data.loading import read_seeds
from tests.helpers.factories import promptriever_row, write_jsonl


def test_conform_orders_casts_and_drops_extra_columns():
    t = pa.table({"relevance": pa.array([1, 0], pa.int64()), "extra": [1, 2], "doc_id": ["d1", "d2"],
                  "view": ["og", "og"], "query_id": ["q", "q"]})
    out = conform(t, EVAL_QRELS)
    assert out.schema.equals(EVAL_QRELS)
    assert out.column("relevance").to_pylist() == [1, 0]


@pytest.mark.parametrize(
    "table, message",
    [
        (pa.table({"query_id": ["q"], "view": ["og"], "doc_id": ["d"]}), r"missing column\(s\) \['relevance'\]"),
        (pa.table({"query_id": ["q"], "view": ["og"], "doc_id": ["d"], "relevance": ["high"]}), "'relevance' is string"),
        (pa.table({"query_id": ["q", None], "view": ["og", "og"], "doc_id": ["d", "e"], "relevance": [1, 0]}), "'query_id' has 1 null"),
    ],
)
def test_conform_rejects_what_does_not_fit(table, message):
    with pytest.raises(ContractError, match=message):
        conform(table, EVAL_QRELS)


def test_seed_rows_round_trip_through_parquet_and_records(tmp_path):
    seeds = read_seeds(str(write_jsonl(tmp_path / "s.jsonl", [promptriever_row("q1")]))).seeds
    path = tmp_path / "out" / "seeds.parquet"
    assert write_table(str(path), seeds, SEED_ROW) == 1
    back = read_table(str(path), SEED_ROW)
    assert back.equals(seeds)
    assert back.to_pylist()[0]["instruction_negatives"][0]["doc_id"] == "q1-i0"


def test_a_failed_write_leaves_no_file(tmp_path):
    path = tmp_path / "q.parquet"
    with pytest.raises(ContractError):
        write_table(str(path), pa.table({"source": ["x"]}), QUARANTINE)
    assert list(tmp_path.iterdir()) == []


def test_the_engine_result_record_and_its_schema_name_the_same_columns_in_order():
    from dualview_core.contracts import ENGINE_RESULT
    from dualview_core.synthesis.records import EngineResult
    from tasks.synthesis.engines import result_row

    assert list(EngineResult.__slots__) == ENGINE_RESULT.names
    row = result_row({"cache_key": "k", "raw_response": "<answer>x</answer>", "prompt_tokens": 3, "extra": 1})
    assert list(row) == ENGINE_RESULT.names and row["attempts"] == 1 and row["error"] is None
    assert pa.Table.from_pylist([row], schema=ENGINE_RESULT).num_rows == 1
