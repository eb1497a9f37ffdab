"""The bundled sample keeps its promises: enough rows, topics, negatives and real instruction changes."""

from __future__ import annotations

from collections import Counter

from dualview_core import sample
from dualview_core.data.evalsets import load_eval_set
from dualview_core.data.loading import read_seeds
from dualview_core.data.seeds import select_synthesis_seeds


def test_seed_sample_is_clean_and_complete():
    load = read_seeds(sample.seeds_path())
    r = load.report
    assert r.quarantined == 0, load.quarantine.to_pylist()[:3]
    assert r.instruct >= 60 and r.non_instruct == r.instruct
    rows = load.seeds.to_pylist()
    instruct = [x for x in rows if x["has_instruction"]]
    twins = {x["query_id"]: x for x in rows if not x["has_instruction"]}
    for row in instruct:
        assert len(row["positives"]) == 1 and len(row["negatives"]) >= 4
        assert 1 <= len(row["instruction_negatives"]) <= 3
        twin = twins[row["query_id"]]
        assert twin["query"] == row["query"] and twin["positives"] == row["positives"]
    assert Counter(len(x["instruction_negatives"]) for x in instruct).keys() == {1, 2, 3}
    assert select_synthesis_seeds(load.seeds).num_rows == r.instruct
    # topics: each topic has its own prefix of docids
    docs = {p["doc_id"]: p["text"] for x in rows for name in ("positives", "negatives", "instruction_negatives") for p in x[name]}
    assert len(set(docs.values())) == len(docs), "a doc id must name one text"


def test_eval_sample_changes_relevance_under_the_changed_instruction():
    load = load_eval_set(sample.followir_path())
    es = load.eval_set
    assert load.quarantined == 0
    assert es.corpus.num_rows >= 200
    og, changed = es.qrels_for("og"), es.qrels_for("changed")
    assert len(og) >= 20 and og.keys() == changed.keys()
    candidates = es.candidates()
    for query_id, judged in og.items():
        flipped = [d for d, rel in judged.items() if rel > 0 and changed[query_id].get(d, 0) == 0]
        assert len(flipped) >= 2, query_id
        assert set(judged) <= set(candidates[query_id])
        query_og, instruction_og = es.queries_for("og")[query_id]
        assert es.queries_for("changed")[query_id][0] == query_og
        assert es.queries_for("changed")[query_id][1] != instruction_og
