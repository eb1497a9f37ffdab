"""The bi-encoder as a SentenceTransformer: what `load_model` decides on top of sentence-transformers
(plain folders, a pooling override, max length, Normalize for training, each role's prompt)."""

from __future__ import annotations

import numpy as np
import pytest

from dualview_core.model import load_model, resolve_model, role_prompt

TEXTS = ["how long to ferment sauerkraut", "Small-Jar Sauerkraut: Timing by Temperature"]


@pytest.fixture(scope="module")
def plain_folder(tmp_path_factory):
    """The packaged MiniLM as a plain Hugging Face folder: no modules.json, so no pooling declared."""
    folder = tmp_path_factory.mktemp("plain")
    st = load_model("minilm")
    st[0].model.save_pretrained(folder)
    st[0].tokenizer.save_pretrained(folder)
    return str(folder)


def test_the_packaged_alias_is_a_folder_and_loads_as_its_authors_saved_it():
    from sentence_transformers import SentenceTransformer

    path = resolve_model("minilm")
    assert path != "minilm" and resolve_model("/some/folder") == "/some/folder"
    np.testing.assert_allclose(load_model("minilm").encode(TEXTS), SentenceTransformer(path, device="cpu").encode(TEXTS),
                               atol=1e-6)


def test_a_plain_folder_gets_mean_pooling_unless_told_otherwise(plain_folder):
    from dualview_core.model import st_modules

    Pooling = st_modules().Pooling

    mean, cls = load_model(plain_folder), load_model(plain_folder, pooling="cls")
    assert [type(m) for m in mean][1] is Pooling and mean[1].pooling_mode == "mean"
    assert cls[1].pooling_mode == "cls"
    assert not np.allclose(mean.encode(TEXTS), cls.encode(TEXTS), atol=1e-3)
    # MiniLM's own folder declares mean pooling and Normalize: the plain folder's mean, normalised
    vectors = mean.encode(TEXTS)
    np.testing.assert_allclose(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), load_model("minilm").encode(TEXTS),
                               atol=1e-5)


def test_a_pooling_override_replaces_the_folders_and_keeps_its_prompt_rule():
    model = load_model("minilm", pooling="max")
    pooling = next(m for m in model if type(m).__name__ == "Pooling")
    assert pooling.pooling_mode == "max" and pooling.include_prompt is True
    assert not np.allclose(model.encode(TEXTS), load_model("minilm").encode(TEXTS), atol=1e-3)


def test_max_length_only_lowers_the_folders():
    own = load_model("minilm").max_seq_length
    assert load_model("minilm", max_length=32).max_seq_length == 32
    assert load_model("minilm", max_length=own + 100).max_seq_length == own


def test_a_model_that_trains_ends_with_one_normalize(plain_folder):
    from dualview_core.model import st_modules

    Normalize = st_modules().Normalize

    assert isinstance(load_model(plain_folder, for_training=True)[-1], Normalize)
    trained = load_model("minilm", for_training=True)  # MiniLM already ends with Normalize
    assert sum(isinstance(m, Normalize) for m in trained) == 1


def test_each_role_gets_the_prompt_encode_query_and_encode_document_use():
    model = load_model("minilm")
    model.prompts, model.default_prompt_name = {"query": "query: ", "classification": "c: "}, None
    assert role_prompt(model, "query") == "query: " and role_prompt(model, "document") is None
    model.default_prompt_name = "classification"
    assert role_prompt(model, "document") == "c: "
    np.testing.assert_allclose(model.encode_query(TEXTS), model.encode(TEXTS, prompt="query: "), atol=1e-6)
    model.prompts["passage"] = "passage: "  # E5-style folders name the document prompt so
    assert role_prompt(model, "document") == "passage: "
    np.testing.assert_allclose(model.encode_document(TEXTS), model.encode(TEXTS, prompt="passage: "), atol=1e-6)


def test_a_module_stack_the_project_never_wrote_loads_and_trains_as_saved(tmp_path):
    """A LayerNorm after pooling (refused by a hand-written loader) is sentence-transformers' to run."""
    from sentence_transformers import SentenceTransformer

    from dualview_core.model import st_modules

    m = st_modules()
    base = load_model("minilm")
    stacked = SentenceTransformer(modules=[base[0], base[1], m.LayerNorm(base[1].get_embedding_dimension())], device="cpu")
    stacked.save(str(tmp_path / "stacked"))
    loaded = load_model(str(tmp_path / "stacked"), for_training=True)
    assert [type(x).__name__ for x in loaded] == ["Transformer", "Pooling", "LayerNorm", "Normalize"]
    vectors = loaded.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("name, hub_id, trust", [("gte-multilingual-mlm-base", "Alibaba-NLP/gte-multilingual-mlm-base", True),
                                                ("bge-m3-retromae", "BAAI/bge-m3-retromae", False)])
def test_a_named_backbone_loads_its_hub_id_with_its_pooling_and_trust(monkeypatch, name, hub_id, trust):
    import dualview_core.model as model_module

    seen = {}

    class Loaded(Exception):
        pass

    def fake(path, **kwargs):  # what sentence-transformers would be asked for; nothing is downloaded
        seen.update(path=path, **kwargs)
        raise Loaded

    monkeypatch.setattr("sentence_transformers.SentenceTransformer", fake)
    monkeypatch.setattr(model_module, "_with_pooling", lambda m, pooling: seen.update(pooling=pooling) or m)
    with pytest.raises(Loaded):
        model_module.load_model(name)
    assert seen["path"] == hub_id and seen["trust_remote_code"] is trust


def test_only_a_checkpoint_trained_from_trusted_code_says_so(tmp_path):
    import json

    from dualview_core.model import trained_with_remote_code

    assert not trained_with_remote_code(str(tmp_path))
    (tmp_path / "dualview.json").write_text(json.dumps({"training_config": {"model": "minilm", "trust_remote_code": False}}))
    assert not trained_with_remote_code(str(tmp_path))
    (tmp_path / "dualview.json").write_text(json.dumps({"training_config": {"model": "gte-multilingual-mlm-base"}}))
    assert trained_with_remote_code(str(tmp_path))
    (tmp_path / "dualview.json").write_text(json.dumps({"training_config": {"model": "x/y", "trust_remote_code": True}}))
    assert trained_with_remote_code(str(tmp_path))
