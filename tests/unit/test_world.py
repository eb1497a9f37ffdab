"""The controlled world: deterministic, disjoint topics, instruction negatives that break their
instruction, and a reference reversal under which N* is the answer and the old positive is not."""

from __future__ import annotations

import json

import pytest

from dualview_core.config import ValidationConfig
from dualview_core.data.evalsets import load_eval_set
from dualview_core.data.loading import read_seeds
from dualview_core.method.parsing import judge
from tests.helpers.world import (ATTRIBUTES, WorldConfig, build_world, read_metadata, reference_answer,
                                 reference_instruction, reversed_instruction, satisfies)

TINY = WorldConfig(seed=3, seed_topics=8, eval_topics=4)


def _topic(query: str) -> str:
    return query.split(" I ")[0].split(" Please ")[0]


def test_same_config_same_world_and_another_seed_another():
    a, b = build_world(TINY), build_world(TINY)
    assert a.seeds == b.seeds and a.corpus == b.corpus and a.qrels_changed == b.qrels_changed
    assert build_world(WorldConfig(seed=4, seed_topics=8, eval_topics=4)).seeds != a.seeds


def test_eval_topics_are_disjoint_from_seed_topics():
    w = build_world(TINY)
    seed_queries = {r["only_query"] for r in w.seeds}
    eval_queries = {q["text"] for q in w.queries}
    assert len(seed_queries) == 8 and len(eval_queries) == 4
    assert not seed_queries & eval_queries


def test_every_instruction_negative_breaks_its_instruction_and_the_positive_meets_it():
    w = build_world(TINY)
    instruct = [r for r in w.seeds if r["has_instruction"]]
    assert len(instruct) == 8
    for row in instruct:
        meta = row["world"]
        attribute, value = meta["attribute"], meta["value"]
        assert value in row["only_instruction"]
        assert satisfies(meta["passages"][row["positive_passages"][0]["docid"]], attribute, value)
        assert len(row["new_negatives"]) == TINY.instruction_negatives
        for neg in row["new_negatives"]:
            attrs = meta["passages"][neg["docid"]]
            assert not satisfies(attrs, attribute, value)
            assert attrs[attribute] in neg["text"]  # checkable from the text


def test_reference_reversal_makes_n_star_the_answer_and_passes_the_guards():
    w = build_world(TINY)
    meta = w.metadata
    for row in (r for r in w.seeds if r["has_instruction"]):
        qid, target = row["query_id"], row["new_negatives"][0]["docid"]
        attribute = meta["seeds"][qid]["attribute"]
        new = reference_instruction(meta, qid, target)
        target_value = meta["seeds"][qid]["passages"][target][attribute]
        assert new == reversed_instruction(attribute, target_value) and target_value in new
        positive = meta["seeds"][qid]["passages"][row["positive_passages"][0]["docid"]]
        assert satisfies(meta["seeds"][qid]["passages"][target], attribute, target_value)
        assert not satisfies(positive, attribute, target_value)  # the old positive now breaks it
        parsed = judge(reference_answer(meta, qid, target), row["only_instruction"], row["only_query"])
        assert parsed.rejection is None and parsed.instruction == new


def test_reference_names_what_the_world_does_not_know():
    meta = build_world(TINY).metadata
    with pytest.raises(KeyError, match="seed nope"):
        reference_instruction(meta, "nope", "w00001")
    with pytest.raises(KeyError, match="passage e00001"):
        reference_instruction(meta, "w0000", "e00001")


def test_changed_qrels_drop_exactly_the_passages_with_another_value():
    w = build_world(TINY)
    og = {(r["query-id"], r["corpus-id"]): r["score"] for r in w.qrels_og}
    changed = {(r["query-id"], r["corpus-id"]): r["score"] for r in w.qrels_changed}
    assert og.keys() == changed.keys()
    for q in w.queries:
        meta = w.metadata["eval"][q["_id"]]
        assert q["instruction_changed"].startswith(q["instruction_og"]) and meta["value"] in q["instruction_changed"]
        on_topic = meta["passages"]
        assert sum(og[(q["_id"], d)] for d in on_topic) == TINY.eval_passages
        dropped = [d for d in on_topic if changed[(q["_id"], d)] == 0]
        assert len(dropped) == TINY.eval_passages - TINY.eval_passages // 2
        assert all(on_topic[d][meta["attribute"]] != meta["value"] for d in dropped)


def test_written_world_loads_as_seeds_and_as_a_followir_eval_set(tmp_path):
    files = build_world(TINY).write(tmp_path)
    load = read_seeds(files["seeds"], cfg=ValidationConfig())
    assert load.report.as_dict()["valid"] == 16 and load.quarantine.num_rows == 0  # the world column is ignored
    es = load_eval_set(files["eval_set"])
    assert es.quarantined == 0 and len(set(es.eval_set.queries.column("query_id").to_pylist())) == 4
    assert read_metadata(files["world"])["seeds"].keys() == {f"w{i:04d}" for i in range(8)}


def test_bad_world_files_and_configs_fail_clearly(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"contract": "other"}))
    with pytest.raises(ValueError, match="not a world.json"):
        read_metadata(tmp_path / "x.json")
    with pytest.raises(ValueError, match="topics"):
        WorldConfig(seed_topics=140, eval_topics=10)
    with pytest.raises(ValueError, match="instruction_negatives"):
        WorldConfig(instruction_negatives=len(ATTRIBUTES["place"]))
