"""Model folders saved by sentence-transformers itself from the packaged MiniLM's weights (no downloads).

One folder per pooling mode (the current `"pooling_mode": ...` key), one with a Dense layer, one
with query/document prompts that pooling leaves out (include_prompt=false), one without Normalize,
and one with the older boolean pooling keys. The transformer weights are identical in all of them,
so every folder's model.safetensors links to the first folder's (saved by sentence-transformers too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dualview_core.encoder import resolve_model
from dualview_core.model_folder import POOLING_MODES

PROMPTS = {"query": "query: ", "document": "passage: "}
VARIANTS = (*POOLING_MODES, "dense", "prompts", "no-normalize", "legacy-cls")


def _modules(variant: str):
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    transformer = Transformer(resolve_model("minilm"))
    dim = transformer.get_embedding_dimension()
    pooling = variant if variant in POOLING_MODES else "cls" if variant == "legacy-cls" else "mean"
    modules = [transformer, Pooling(dim, pooling_mode=pooling, include_prompt=variant != "prompts")]
    if variant == "dense":
        torch.manual_seed(0)
        modules.append(Dense(dim, 128))  # Tanh, the sentence-transformers default
    return modules if variant == "no-normalize" else [*modules, Normalize()]


def build(root: Path, variant: str, weights: Path | None = None) -> Path:
    from sentence_transformers import SentenceTransformer

    out = root / variant
    model = SentenceTransformer(modules=_modules(variant), device="cpu",
                                prompts=PROMPTS if variant == "prompts" else None)
    model.save(str(out))
    if variant == "legacy-cls":  # the spelling of sentence-transformers 2.x-5.x folders
        config = json.loads((out / "1_Pooling" / "config.json").read_text())
        (out / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": config["embedding_dimension"], "pooling_mode_cls_token": True,
            "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False}))
    if weights is not None:
        (out / "model.safetensors").unlink()
        os.symlink(weights, out / "model.safetensors")
    return out


class Folders(dict):
    """variant -> folder, each built on first use (the first one built holds the shared weights)."""

    def __init__(self, root: Path):
        super().__init__()
        self.root, self.weights = root, None

    def __missing__(self, variant: str) -> Path:
        self[variant] = build(self.root, variant, self.weights)
        self.weights = self.weights or self[variant] / "model.safetensors"
        return self[variant]
