"""Hand-made Promptriever rows and small file writers for tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def passage(doc_id: str, text: str, title: str = "") -> dict:
    return {"docid": doc_id, "title": title, "text": text}


def promptriever_row(query_id: str = "q1", *, instruct: bool = True, n_neg: int = 4, n_inst_neg: int = 2) -> dict:
    """One row with the published Promptriever columns, distinct texts everywhere."""
    query = f"how do I store {query_id} seeds"
    instruction = "Only guidance for home gardeners is relevant." if instruct else ""
    return {
        "query_id": query_id,
        "query": f"{query} {instruction}".strip(),
        "only_query": query,
        "only_instruction": instruction,
        "has_instruction": instruct,
        "positive_passages": [passage(f"{query_id}-pos", f"Keep {query_id} seeds dry in a jar.", "Storing")],
        "negative_passages": [passage(f"{query_id}-n{i}", f"Unrelated note {i} about {query_id}.") for i in range(n_neg)],
        "new_negatives": [passage(f"{query_id}-i{i}", f"Industrial silo storage {i} for {query_id}.") for i in range(n_inst_neg)]
        if instruct else [],
    }


def write_jsonl(path: Path, rows: list) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return path


def write_parquet(path: Path, rows: list[dict], row_group_size: int | None = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


