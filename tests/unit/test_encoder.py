"""The encoder: pooling math on plain tensors, and equality with sentence-transformers on MiniLM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dualview_core.encoder import Encoder, pool, pooling_of, query_text, resolve_model


def test_query_text_joins_query_and_instruction():
    assert query_text("q", "Only Europe.") == "q Only Europe."
    assert query_text("q", "") == "q"
    assert query_text("q", "I", template="Instruct: {instruction}\nQuery: {query}") == "Instruct: I\nQuery: q"


def test_pooling_modes_by_hand_on_right_and_left_padding():
    hidden = torch.tensor([[[3.0, 0.0], [1.0, 2.0], [100.0, 100.0]]])  # (1, 3, 2); last token is padding
    right = torch.tensor([[1, 1, 0]])
    expected = {"mean": [2.0, 1.0], "cls": [3.0, 0.0], "lasttoken": [1.0, 2.0], "max": [3.0, 2.0],
                "mean_sqrt_len_tokens": [4 / 2**0.5, 2 / 2**0.5], "weightedmean": [(3 + 2) / 3, 4 / 3]}
    for mode, value in expected.items():
        assert torch.allclose(pool(hidden, right, mode), torch.tensor([value])), mode
    # the same tokens left-padded: the same vectors
    left_hidden, left = hidden[:, [2, 0, 1]], torch.tensor([[0, 1, 1]])
    for mode, value in expected.items():
        assert torch.allclose(pool(left_hidden, left, mode), torch.tensor([value])), mode
    assert torch.allclose(pool(hidden, right, ("cls", "mean")), torch.tensor([[3.0, 0.0, 2.0, 1.0]]))
    assert torch.allclose(pool(hidden, right, "mean", prompt_length=1), torch.tensor([[1.0, 2.0]]))  # prompt left out
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(hidden, right, "median")


@pytest.fixture(scope="module")
def minilm() -> Encoder:
    return Encoder("minilm", max_length=128)


def test_minilm_matches_sentence_transformers_in_input_order(minilm):
    from sentence_transformers import SentenceTransformer

    texts = ["a short one", "a considerably longer sentence about wind turbines in the North Sea", "mid length text here"]
    ours = minilm.encode(texts, batch_size=2)
    reference = SentenceTransformer(resolve_model("minilm"), device="cpu").encode(texts, normalize_embeddings=True)
    assert ours.shape == (3, 384)
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_packaged_minilm_declares_mean_pooling():
    assert pooling_of(resolve_model("minilm")) == ("mean",)  # the older boolean keys


def test_unsupported_folders_fail_with_one_line(tmp_path):
    import json

    from dualview_core.model_folder import ModelFolderError, read_model_folder

    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "path": "1_Router", "type": "sentence_transformers.models.Router"}]))
    with pytest.raises(ModelFolderError, match="Router"):
        read_model_folder(tmp_path)
    assert read_model_folder(tmp_path / "plain", pooling="cls").pooling == ("cls",)  # a plain folder declares none
