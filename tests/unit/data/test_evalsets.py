"""Eval-set loaders: each published layout becomes the same EvalSet; bad rows are quarantined."""

from __future__ import annotations

import pytest

from dualview_core.contracts import EVAL_CORPUS, EVAL_QRELS, EVAL_QUERIES, EVAL_TOP_RANKED, Reason
from dualview_core.data.evalsets import load_eval_set
from dualview_core.data.sources import SourceError
from tests.helpers.factories import write_jsonl, write_parquet

DOCS = [{"_id": f"d{i}", "title": f"T{i}", "text": f"text {i}"} for i in range(5)]
OG = {"q1": {"d0": 1, "d1": 1, "d2": 0}, "q2": {"d3": 1, "d4": 0}}
CHANGED = {"q1": {"d0": 1, "d1": 0, "d2": 0}, "q2": {"d3": 0, "d4": 0}}


def qrel_rows(qrels, suffix=""):
    return [{"query-id": q + suffix, "corpus-id": d, "score": s} for q, docs in qrels.items() for d, s in docs.items()]


def followir_original(folder, *, reversed_view=False):
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", DOCS)
    queries = [
        {"_id": "q1", "text": "wind power", "instruction_og": "Any country.", "instruction_changed": "Not offshore."},
        {"_id": "q2", "text": "rail strikes", "instruction_og": "Any year.", "instruction_changed": "Only 2020."},
    ]
    if reversed_view:
        for q in queries:
            q["instruction_reversed"] = "Only offshore."
        write_jsonl(folder / "qrels_reversed.jsonl", qrel_rows({"q1": {"d1": 1}}))
    write_jsonl(folder / "queries.jsonl", queries)
    write_jsonl(folder / "qrels_og.jsonl", qrel_rows(OG))
    (folder / "qrels_changed.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{r['query-id']}\t{r['corpus-id']}\t{r['score']}\n" for r in qrel_rows(CHANGED))
    )
    write_jsonl(folder / "top_ranked.jsonl", [{"qid": "q1", "pid": d} for d in ("d2", "d0", "d1", "d0")] + [{"qid": "q2", "pid": ["d3", "d4"]}])
    return folder


def test_followir_original_layout(tmp_path):
    load = load_eval_set(str(followir_original(tmp_path / "core17")))
    es = load.eval_set
    assert load.quarantined == 0
    assert es.name == "core17"
    assert es.corpus.schema.equals(EVAL_CORPUS) and es.queries.schema.equals(EVAL_QUERIES)
    assert es.qrels.schema.equals(EVAL_QRELS) and es.top_ranked.schema.equals(EVAL_TOP_RANKED)
    assert es.views() == ["changed", "og"]
    assert es.qrels_for("og") == OG
    assert es.qrels_for("changed") == CHANGED
    assert es.queries_for("changed")["q1"] == ("wind power", "Not offshore.")
    assert es.candidates() == {"q1": ["d2", "d0", "d1"], "q2": ["d3", "d4"]}


def mteb2_folder(folder, og=OG, changed=CHANGED, diff=(("q1", ["d1"]), ("q2", ["d3"]))):
    folder.mkdir()
    write_parquet(folder / "corpus.parquet", [{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in DOCS])
    write_jsonl(folder / "queries.jsonl", [
        {"id": "q1-og", "text": "wind power"}, {"id": "q1-changed", "text": "wind power"},
        {"id": "q2-og", "text": "rail strikes"}, {"id": "q2-changed", "text": "rail strikes"},
    ])
    write_jsonl(folder / "instructions.jsonl", [
        {"query-id": "q1-og", "instruction": "Any country."}, {"query-id": "q1-changed", "instruction": "Not offshore."},
        {"query-id": "q2-og", "instruction": "Any year."}, {"query-id": "q2-changed", "instruction": "Only 2020."},
    ])
    write_jsonl(folder / "qrels.jsonl", qrel_rows(og, "-og") + qrel_rows(changed, "-changed"))
    write_jsonl(folder / "qrel_diff.jsonl", [{"query-id": q, "corpus-ids": docs} for q, docs in diff])
    write_jsonl(folder / "top_ranked.jsonl", [{"query-id": "q1", "corpus-ids": ["d2", "d0", "d1"]}, {"query-id": "q2", "corpus-ids": ["d3", "d4"]}])
    return folder


def test_mteb2_layout_gives_the_same_eval_set(tmp_path):
    original = load_eval_set(str(followir_original(tmp_path / "orig"))).eval_set
    folder = mteb2_folder(tmp_path / "mteb")
    load = load_eval_set(str(folder), name="orig")
    es = load.eval_set
    assert load.quarantined == 0
    assert es.meta == {"layout": "mteb2", "qrel_diff_mismatches": "0"}
    for view in ("og", "changed"):
        assert es.qrels_for(view) == original.qrels_for(view)
        assert es.queries_for(view) == original.queries_for(view)
    assert es.candidates() == original.candidates()


def test_shipped_qrel_diff_is_checked_by_the_definition_p_mrr_uses(tmp_path):
    # a graded label change (2 -> 1) is a changed document for p-MRR, though relevant both times
    og = {"q1": {"d0": 2, "d1": 1, "d2": 0}, "q2": {"d3": 1, "d4": 0}}
    changed = {"q1": {"d0": 1, "d1": 0, "d2": 0}, "q2": {"d3": 0, "d4": 0}}
    agreeing = mteb2_folder(tmp_path / "a", og, changed, diff=(("q1", ["d0", "d1"]), ("q2", ["d3"])))
    assert load_eval_set(str(agreeing)).eval_set.meta["qrel_diff_mismatches"] == "0"
    relevance_only = mteb2_folder(tmp_path / "b", og, changed, diff=(("q1", ["d1"]), ("q2", ["d3"])))
    assert load_eval_set(str(relevance_only)).eval_set.meta["qrel_diff_mismatches"] == "1"
    wrong_query = mteb2_folder(tmp_path / "c", diff=(("q1", ["d1"]), ("q2", ["d4"])))
    assert load_eval_set(str(wrong_query)).eval_set.meta["qrel_diff_mismatches"] == "1"


def test_infosearch_adds_the_reversed_view(tmp_path):
    es = load_eval_set(str(followir_original(tmp_path / "length", reversed_view=True))).eval_set
    assert es.views() == ["changed", "og", "reversed"]
    assert es.qrels_for("reversed") == {"q1": {"d1": 1}}
    assert es.queries_for("reversed")["q2"] == ("rail strikes", "Only offshore.")


def test_mair_labels_become_og_qrels(tmp_path):
    folder = tmp_path / "mair"
    folder.mkdir()
    write_jsonl(folder / "docs.jsonl", [{"id": "a", "doc": "alpha"}, {"id": "b", "doc": "beta"}])
    write_jsonl(folder / "queries.jsonl", [
        {"qid": "m1", "query": "first letter", "instruction": "Return the Greek letter.", "labels": [{"id": "a", "score": 1}]},
        {"qid": "m2", "query": "second", "instruction": "Return it.", "labels": [{"id": "b", "score": 2}, {"id": "zzz", "score": 1}]},
    ])
    load = load_eval_set(str(folder))
    es = load.eval_set
    assert es.views() == ["og"]
    assert es.qrels_for("og") == {"m1": {"a": 1}, "m2": {"b": 2}}
    assert es.top_ranked is None
    assert [(r.reason, r.query_id) for r in load.rejected["queries"]] == [(Reason.UNKNOWN_REFERENCE, "m2")]


def test_bad_rows_are_quarantined_with_reasons(tmp_path):
    folder = followir_original(tmp_path / "bad")
    write_jsonl(folder / "corpus.jsonl", DOCS + [{"_id": "d0", "text": "again"}, {"_id": "d9", "text": " "}, {"text": "no id"}])
    write_jsonl(folder / "qrels_og.jsonl", qrel_rows(OG) + [
        {"query-id": "q1", "corpus-id": "d4", "score": "high"},
        {"query-id": "q404", "corpus-id": "d0", "score": 1},
        {"query-id": "q1", "corpus-id": "d404", "score": 1},
    ])
    load = load_eval_set(str(folder))
    reasons = {name: [(r.reason, r.row_index) for r in rows] for name, rows in load.rejected.items()}
    assert reasons == {
        "corpus": [(Reason.DUPLICATE_ID, 5), (Reason.EMPTY_TEXT, 6), (Reason.MISSING_FIELD, 7)],
        "qrels_og": [(Reason.WRONG_TYPE, 5), (Reason.UNKNOWN_REFERENCE, 6), (Reason.UNKNOWN_REFERENCE, 7)],
    }
    assert load.eval_set.qrels_for("og") == OG  # the good rows all went on


def test_missing_folder_or_table_is_a_clear_error(tmp_path):
    with pytest.raises(SourceError, match="no such folder"):
        load_eval_set(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no corpus table"):
        load_eval_set(str(tmp_path / "empty"))


def test_a_followir_folder_without_changed_judgments_is_refused_naming_what_was_expected(tmp_path):
    folder = followir_original(tmp_path / "core17")
    (folder / "qrels_changed.tsv").unlink()
    with pytest.raises(SourceError, match="FollowIR folder .* without qrels_changed; expected corpus, queries, "
                                          "qrels_og and qrels_changed"):
        load_eval_set(str(folder))


def test_dropped_rows_are_counted_by_table_and_reason_and_strict_refuses_them(tmp_path):
    folder = followir_original(tmp_path / "core17")
    write_jsonl(folder / "qrels_og.jsonl", qrel_rows(OG) + [{"query-id": "q1", "corpus-id": "d4", "score": "high"}])
    load = load_eval_set(str(folder))
    assert load.dropped() == {"qrels_og": {"rows": 1, "reasons": {"wrong_type": 1}}}
    with pytest.raises(SourceError, match=r"1 rows would be left out of the metrics \(qrels_og: 1 \(wrong_type 1\)\)"):
        load.refuse_drops(str(folder))
    load_eval_set(str(followir_original(tmp_path / "clean"))).refuse_drops("clean")  # nothing dropped: nothing refused
