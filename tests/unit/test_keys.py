"""Content keys: stable under reordering, rewriting and format conversion; sensitive to any text."""

from __future__ import annotations

import json

import pytest

from dualview_core.keys import content_digest
from dualview_core.data.loading import read_seeds
from tests.helpers.factories import promptriever_row, write_jsonl, write_parquet


def keys_by_id(path) -> dict[tuple[str, bool], str]:
    t = read_seeds(str(path)).seeds
    return {(r["query_id"], r["has_instruction"]): r["seed_key"] for r in t.to_pylist()}


def test_keys_survive_reorder_rewrite_and_format_conversion(tmp_path, rows):
    base = keys_by_id(write_jsonl(tmp_path / "a.jsonl", rows))
    reordered = keys_by_id(write_jsonl(tmp_path / "b.jsonl", list(reversed(rows))))
    # rewritten: different key order and spacing in every JSON object, plus an extra column
    rewritten = [json.dumps(dict(reversed(list({**r, "extra": 1}.items()))), indent=None, separators=(", ", " : ")) for r in rows]
    rewritten_keys = keys_by_id(write_jsonl(tmp_path / "c.jsonl", rewritten))
    parquet = keys_by_id(write_parquet(tmp_path / "d.parquet", rows))
    assert len(set(base.values())) == len(rows)
    assert base == reordered == rewritten_keys == parquet


def test_numeric_and_string_doc_ids_give_the_same_key(tmp_path):
    a = promptriever_row("q1")
    b = promptriever_row("q1")
    a["negative_passages"][0]["docid"] = "17"
    b["negative_passages"][0]["docid"] = 17
    assert keys_by_id(write_jsonl(tmp_path / "a.jsonl", [a])) == keys_by_id(write_jsonl(tmp_path / "b.jsonl", [b]))


EDITS = {
    "query": lambda r: r.update(only_query=r["only_query"] + "?"),
    "instruction": lambda r: r.update(only_instruction=r["only_instruction"] + " "),
    "positive text": lambda r: r["positive_passages"][0].update(text="Keep them cool."),
    "positive title": lambda r: r["positive_passages"][0].update(title="Other"),
    "negative text": lambda r: r["negative_passages"][3].update(text="changed"),
    "instruction negative text": lambda r: r["new_negatives"][1].update(text="changed"),
    "instruction negative order": lambda r: r["new_negatives"].reverse(),
    "doc id": lambda r: r["negative_passages"][0].update(docid="other"),
    "query id": lambda r: r.update(query_id="q2"),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_any_content_change_changes_the_key(tmp_path, edit):
    original = promptriever_row("q1")
    changed = promptriever_row("q1")
    EDITS[edit](changed)
    before = keys_by_id(write_jsonl(tmp_path / "a.jsonl", [original]))
    after = keys_by_id(write_jsonl(tmp_path / "b.jsonl", [changed]))
    assert list(before.values()) != list(after.values())


def test_the_unused_published_query_column_does_not_enter_the_key(tmp_path):
    # `query` duplicates only_query + only_instruction; the key covers the parts, not the join
    a, b = promptriever_row("q1"), promptriever_row("q1")
    b["query"] = "something else"
    assert keys_by_id(write_jsonl(tmp_path / "a.jsonl", [a])) == keys_by_id(write_jsonl(tmp_path / "b.jsonl", [b]))


def test_content_digest_is_order_independent_and_content_sensitive():
    assert content_digest(["b", "a", "c"]) == content_digest(["c", "b", "a"])
    assert content_digest(["a", "b"]) != content_digest(["a", "b", "c"])
    assert content_digest(["ab"]) != content_digest(["a", "b"])


def test_an_arrow_array_of_keys_has_the_digest_of_its_python_list():
    import random

    import pyarrow as pa

    import dualview_core.keys as keys_module

    keys = [f"{random.Random(i).getrandbits(64):016x}" for i in range(1000)]
    chunked = pa.chunked_array([keys[:300], keys[300:]])
    old, keys_module.DIGEST_SLICE = keys_module.DIGEST_SLICE, 7  # several slices, one of them short
    try:
        assert content_digest(pa.array(keys)) == content_digest(chunked) == content_digest(keys)
    finally:
        keys_module.DIGEST_SLICE = old


def test_seed_bytes_are_the_canonical_json_for_every_code_point():
    """orjson writes the key's bytes; they must be `canonical_json`'s, or every cached key would move."""
    from dualview_core.keys import _canonical_seed, canonical_json, seed_bytes

    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]  # escaping is per character
    for start in range(0, len(points), 4096):
        text = "".join(points[start:start + 4096])
        row = {"query_id": text, "query": text[::-1], "instruction": "", "has_instruction": start % 2 == 0,
               "positives": [{"doc_id": "d", "title": text, "text": "t"}], "negatives": [], "instruction_negatives": []}
        assert seed_bytes(row) == canonical_json(_canonical_seed(row)), f"code points from {start:#x}"


def test_a_lone_surrogate_cannot_be_keyed():
    from dualview_core.keys import seed_bytes

    row = {"query_id": "q\ud800", "query": "q", "instruction": "", "has_instruction": False,
           "positives": [], "negatives": [], "instruction_negatives": []}
    with pytest.raises(TypeError):
        seed_bytes(row)
