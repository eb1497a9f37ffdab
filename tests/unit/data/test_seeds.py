"""Seed validation: one test per quarantine reason, reconciliation, selection."""

from __future__ import annotations

import pytest

from dualview_core.config import ValidationConfig
from dualview_core.contracts import SEED_ROW, Reason, Rejected
from dualview_core.data.loading import read_seeds, stream_seeds
from dualview_core.data.seeds import SeedValidator, select_synthesis_seeds
from dualview_core.data.sources import RawRow
from tests.helpers.factories import promptriever_row, write_jsonl


def check(row, cfg: ValidationConfig | None = None):
    return SeedValidator(cfg).check(RawRow(0, row))


def test_valid_row_is_translated_into_project_vocabulary():
    row = check(promptriever_row("q7", n_neg=5, n_inst_neg=3))
    assert row["query_id"] == "q7"
    assert row["query"] == "how do I store q7 seeds"
    assert row["instruction"] == "Only guidance for home gardeners is relevant."
    assert row["has_instruction"] is True
    assert [p["doc_id"] for p in row["positives"]] == ["q7-pos"]
    assert len(row["negatives"]) == 5
    assert [p["doc_id"] for p in row["instruction_negatives"]] == ["q7-i0", "q7-i1", "q7-i2"]
    assert set(row) == set(SEED_ROW.names)
    assert len(row["seed_key"]) == 32


def test_non_instruct_row_is_valid_with_empty_instruction_and_null_new_negatives():
    raw = promptriever_row("q1", instruct=False)
    raw["new_negatives"] = None
    row = check(raw)
    assert row["has_instruction"] is False
    assert row["instruction"] == ""
    assert row["instruction_negatives"] == []


def test_numeric_ids_become_strings():
    raw = promptriever_row("q1")
    raw["query_id"] = 1234
    raw["positive_passages"][0]["docid"] = 99
    row = check(raw)
    assert row["query_id"] == "1234"
    assert row["positives"][0]["doc_id"] == "99"


def mutate(fn):
    raw = promptriever_row("q1")
    fn(raw)
    return raw


@pytest.mark.parametrize(
    "raw, reason, detail",
    [
        ("not a row", Reason.MALFORMED, "row is str"),
        (mutate(lambda r: r.pop("only_query")), Reason.MISSING_FIELD, "only_query is missing"),
        (mutate(lambda r: r["positive_passages"][0].pop("text")), Reason.MISSING_FIELD, "positives[0].text is missing"),
        (mutate(lambda r: r.update(has_instruction="yes")), Reason.WRONG_TYPE, "has_instruction is str"),
        (mutate(lambda r: r.update(only_query=["a"])), Reason.WRONG_TYPE, "query is list"),
        (mutate(lambda r: r.update(negative_passages="p")), Reason.WRONG_TYPE, "negatives is str"),
        (mutate(lambda r: r["negative_passages"].append("p")), Reason.WRONG_TYPE, "negatives[4] is str"),
        (mutate(lambda r: r.update(only_query="   ")), Reason.EMPTY_TEXT, "query is empty"),
        (mutate(lambda r: r.update(only_instruction="")), Reason.EMPTY_TEXT, "instruction is empty"),
        (mutate(lambda r: r["new_negatives"][1].update(text="\n")), Reason.EMPTY_TEXT, "instruction_negatives[1].text is empty"),
        (mutate(lambda r: r.update(positive_passages=[])), Reason.NO_POSITIVE, "positives is empty"),
        (mutate(lambda r: r["negative_passages"][2].update(text="x" * 20_001)), Reason.PASSAGE_TOO_LONG, "negatives[2] has 20001 chars"),
        (mutate(lambda r: r["new_negatives"][0].update(docid="q1-pos")), Reason.INSTRUCTION_NEGATIVE_IS_POSITIVE, "instruction_negatives[0] (q1-pos)"),
        (mutate(lambda r: r["new_negatives"][1].update(text=" Keep q1 seeds  dry in a jar. ")), Reason.INSTRUCTION_NEGATIVE_IS_POSITIVE, "is the positive"),
        (mutate(lambda r: r.update(only_query="bad \ud800 text")), Reason.UNDECODABLE, "query holds undecodable"),
        (mutate(lambda r: r["positive_passages"][0].update(text="caf\ufffd")), Reason.UNDECODABLE, "positives[0].text"),
    ],
)
def test_each_reason(raw, reason, detail):
    result = check(raw)
    assert isinstance(result, Rejected)
    assert result.reason == reason
    assert detail in result.detail


def test_passage_length_bound_is_configurable():
    raw = promptriever_row("q1")
    raw["negative_passages"][0]["text"] = "y" * 500
    assert isinstance(check(raw, ValidationConfig(max_passage_chars=499)), Rejected)
    assert not isinstance(check(raw, ValidationConfig(max_passage_chars=500)), Rejected)


def test_duplicate_id_is_per_instruct_flag_and_first_valid_row_wins():
    v = SeedValidator()
    first = v.check(RawRow(0, promptriever_row("q1")))
    twin = v.check(RawRow(1, promptriever_row("q1", instruct=False)))  # same id, other flag: fine
    again = v.check(RawRow(2, promptriever_row("q1")))
    assert not isinstance(first, Rejected) and not isinstance(twin, Rejected)
    assert isinstance(again, Rejected) and again.reason == Reason.DUPLICATE_ID and again.row_index == 2


def test_a_quarantined_row_does_not_claim_its_id():
    v = SeedValidator()
    bad = promptriever_row("q1")
    bad["only_query"] = ""
    assert isinstance(v.check(RawRow(0, bad)), Rejected)
    assert not isinstance(v.check(RawRow(1, promptriever_row("q1"))), Rejected)


def test_rows_in_equal_valid_plus_quarantined_with_reasons(tmp_path):
    good = [promptriever_row(f"q{i}") for i in range(5)] + [promptriever_row("q0", instruct=False)]
    broken_row = promptriever_row("q9")
    broken_row["positive_passages"] = []
    lines = good + [
        '{"query_id": "q8", "only_query": ',  # truncated JSON
        broken_row,
        promptriever_row("q1"),  # duplicate
        "[1, 2, 3]",  # JSON, but not an object
    ]
    path = write_jsonl(tmp_path / "seeds.jsonl", lines)
    with open(path, "ab") as f:
        f.write(b'{"query_id": "q10", "only_query": "caf\xe9"}\n')  # latin-1 byte, not UTF-8
    load = read_seeds(str(path))
    r = load.report
    assert (r.rows, r.valid, r.quarantined) == (11, 6, 5)
    assert r.rows == r.valid + r.quarantined == load.seeds.num_rows + load.quarantine.num_rows
    assert r.by_reason == {"malformed_record": 2, "no_positive": 1, "duplicate_id": 1, "undecodable_text": 1}
    assert (r.instruct, r.non_instruct, r.with_instruction_negatives) == (5, 1, 5)
    q = load.quarantine.to_pylist()
    assert [x["row_index"] for x in q] == [6, 7, 8, 9, 10]
    assert q[0]["raw"] == '{"query_id": "q8", "only_query": '
    assert q[1]["query_id"] == "q9" and q[1]["source"] == str(path)
    assert "caf\\xe9" in q[4]["raw"]


def test_stream_writes_quarantine_parquet_even_when_empty(tmp_path, rows):
    src = write_jsonl(tmp_path / "seeds.jsonl", rows)
    out = tmp_path / "q" / "quarantine.parquet"
    batches, validator = stream_seeds(str(src), cfg=ValidationConfig(batch_rows=2), quarantine_path=str(out))
    tables = list(batches)
    assert [t.num_rows for t in tables] == [2, 2, 2]
    assert out.exists() and validator.report.quarantined == 0
    assert not list(out.parent.glob(".*.tmp"))


def test_selection_keeps_instruct_rows_with_an_instruction_negative(tmp_path):
    rows = [promptriever_row("a"), promptriever_row("b", n_inst_neg=0), promptriever_row("a", instruct=False)]
    load = read_seeds(str(write_jsonl(tmp_path / "s.jsonl", rows)))
    assert load.report.with_instruction_negatives == 1
    assert select_synthesis_seeds(load.seeds).column("query_id").to_pylist() == ["a"]


def test_any_mapping_is_a_row():
    from types import MappingProxyType

    row = check(MappingProxyType(promptriever_row("q1")))
    assert not isinstance(row, Rejected) and row["query_id"] == "q1"
