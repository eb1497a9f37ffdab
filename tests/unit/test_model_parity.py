"""Parity: every folder sentence-transformers 6.2 saves is embedded exactly as it embeds it.

Folders (tests/helpers/st_folders.py): each pooling mode, a Dense layer, prompts left out of pooling, no
Normalize, the older pooling keys. Fast: a few texts per folder. Slow: every text of the bundled
FollowIR sample, and the `dualview evaluate` CLI's og-run scores against sentence-transformers cosines.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dualview_core.encoder import Encoder, query_text
from dualview_core.evalsets import load_eval_set
from dualview_core.model_folder import read_model_folder
from dualview_core.retrieval import doc_text
from dualview_core.samples import followir_path
from dualview_core.trec import read_run
from flows.cli import main
from tests.helpers.st_folders import PROMPTS, VARIANTS

TEXTS = ["a short one", "a considerably longer sentence about wind turbines in the North Sea, with numbers 1 2 3",
         "mid length text here", "x"]


def reference(folder):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


FAST = ("lasttoken", "dense", "prompts")  # the rest of VARIANTS run in the slow suite


@pytest.mark.parametrize("variant", [v if v in FAST else pytest.param(v, marks=pytest.mark.slow) for v in VARIANTS])
def test_every_folder_embeds_as_sentence_transformers(st_folders, variant):
    st, ours = reference(st_folders[variant]), Encoder(str(st_folders[variant]))
    assert ours.max_length == st.max_seq_length
    for method in ("encode", "encode_query", "encode_document"):
        expected = getattr(st, method)(TEXTS)
        got = getattr(ours, method)(TEXTS, batch_size=3)  # batches mix lengths: padding must not matter
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=method)


@pytest.mark.slow
def test_folders_declare_what_was_asked(st_folders):
    assert read_model_folder(st_folders["lasttoken"]).pooling == ("lasttoken",)
    assert read_model_folder(st_folders["legacy-cls"]).pooling == ("cls",)
    dense = read_model_folder(st_folders["dense"])
    assert [s if isinstance(s, str) else (s.in_features, s.out_features) for s in dense.steps] == [(384, 128), "normalize"]
    prompts = read_model_folder(st_folders["prompts"])
    assert prompts.prompt("query") == "query: " and prompts.prompt("document") == "passage: " and prompts.prompt(None) == ""
    assert not prompts.include_prompt and not read_model_folder(st_folders["no-normalize"]).normalized


def test_modes_really_differ(st_folders):
    # the parity above would be empty if every folder embedded alike
    vectors = {v: Encoder(str(st_folders[v])).encode(TEXTS[:2]) for v in ("lasttoken", "prompts")}  # prompts: mean pooling
    for a in vectors:
        for b in vectors:
            assert a == b or np.abs(vectors[a] - vectors[b]).max() > 0.05


def test_prompts_are_put_before_query_and_instruction(st_folders):
    ours = Encoder(str(st_folders["prompts"]))
    assert ours.texts_for([query_text("q", "Only Europe.")], "query") == [PROMPTS["query"] + "q Only Europe."]
    assert ours.prompt_length("query") == 3 and ours.prompt_length(None) is None  # "query", ":", then the text


def eval_texts() -> tuple[list[str], list[str]]:
    es = load_eval_set(followir_path()).eval_set
    queries = [query_text(*es.queries_for(view)[q]) for view in ("og", "changed") for q in es.queries_for(view)]
    return queries, [doc_text(r["title"], r["text"]) for r in es.corpus.to_pylist()]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["mean", "lasttoken", "prompts"])  # where truncation of long texts differs
def test_the_bundled_eval_set_embeds_as_sentence_transformers(st_folders, variant):
    queries, docs = eval_texts()
    st, ours = reference(st_folders[variant]), Encoder(str(st_folders[variant]))
    np.testing.assert_allclose(ours.encode_query(queries), st.encode_query(queries), atol=1e-5)
    np.testing.assert_allclose(ours.encode_document(docs), st.encode_document(docs), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["dense", "prompts"])  # a layer after pooling; prompts left out of pooling
def test_evaluate_cli_scores_are_sentence_transformers_cosines(st_folders, variant, tmp_path, capsys):
    assert main(["evaluate", "--model", str(st_folders[variant]), "--eval-set", followir_path(),
                 "--out", str(tmp_path), "--resamples", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(st_folders[variant])
    es = load_eval_set(followir_path()).eval_set
    run = read_run(str(tmp_path / "run_og.trec"), es.qrels_for("og"))
    queries, corpus = es.queries_for("og"), {r["doc_id"]: doc_text(r["title"], r["text"]) for r in es.corpus.to_pylist()}
    st = reference(st_folders[variant])
    query_ids, doc_ids = list(run), sorted({doc for scores in run.values() for doc in scores})
    q = dict(zip(query_ids, st.encode_query([query_text(*queries[i]) for i in query_ids], normalize_embeddings=True)))
    d = dict(zip(doc_ids, st.encode_document([corpus[i] for i in doc_ids], normalize_embeddings=True)))
    worst = max(abs(float(d[doc] @ q[query_id]) - score) for query_id, scores in run.items() for doc, score in scores.items())
    assert len(run) == len(queries) and worst < 1e-5
