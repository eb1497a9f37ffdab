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


def test_mean_pooling_ignores_padding_and_normalises():
    hidden = torch.tensor([[[3.0, 0.0], [1.0, 0.0], [100.0, 100.0]]])  # (1, 3, 2); last token is padding
    mask = torch.tensor([[1, 1, 0]])
    assert torch.allclose(pool(hidden, mask, "mean"), torch.tensor([[1.0, 0.0]]))
    cls = pool(torch.tensor([[[3.0, 4.0], [0.0, 1.0]]]), torch.tensor([[1, 1]]), "cls")
    assert torch.allclose(cls, torch.tensor([[0.6, 0.8]]))
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(hidden, mask, "max")


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
    assert pooling_of(resolve_model("minilm")) == "mean"
