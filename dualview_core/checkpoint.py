"""Checkpoints as sentence-transformers folders, written without sentence-transformers.

Owns the folder layout a trained encoder is published in, so that `SentenceTransformer(path)` —
and mteb through it — loads exactly the model `Encoder(path)` runs:

    config.json, model.safetensors, tokenizer files   the Hugging Face model (save_pretrained)
    modules.json                                      Transformer -> Pooling -> [Dense ...] -> Normalize
    1_Pooling/config.json                             the pooling it was trained with
    <i>_Dense/config.json, model.safetensors          each Dense step of the base folder, trained
    sentence_bert_config.json                         max_seq_length, do_lower_case
    config_sentence_transformers.json                 cosine similarity, the base folder's prompts
    dualview.json                                     how it was trained (config, data digest)

The classic module names and keys are written on purpose: every sentence-transformers release
still reads them (6.x included) and older mteb environments read nothing newer. The model and
tokenizer are duck-typed (`save_pretrained`); safetensors (torch) is imported only to write Dense
weights, and uploading the folder to s3:// is the task's job.
"""

from __future__ import annotations

import json
from pathlib import Path

from dualview_core.model_folder import LEGACY_POOLING_KEYS, POOLING_MODES, DenseSpec, FolderSpec

METADATA = "dualview.json"
TYPES = {"Transformer": "sentence_transformers.models.Transformer", "Pooling": "sentence_transformers.models.Pooling",
         "Dense": "sentence_transformers.models.Dense", "Normalize": "sentence_transformers.models.Normalize"}


def published_steps(spec: FolderSpec) -> tuple[DenseSpec | str, ...]:
    """The steps after pooling a trained model is published with: the base folder's, then Normalize
    (training contrasts unit vectors) unless the base already ends with it."""
    return spec.steps if spec.normalized else (*spec.steps, "normalize")


def modules_json(spec: FolderSpec) -> list[dict]:
    """Transformer (the folder's root) -> Pooling -> each Dense / Normalize step, numbered as sentence-transformers does."""
    entries = [("Transformer", ""), ("Pooling", "1_Pooling")]
    for i, step in enumerate(published_steps(spec), start=2):
        kind = "Normalize" if step == "normalize" else "Dense"
        entries.append((kind, f"{i}_{kind}"))
    return [{"idx": i, "name": str(i), "path": path, "type": TYPES[kind]} for i, (kind, path) in enumerate(entries)]


def pooling_config(dim: int, pooling: tuple[str, ...] | str, include_prompt: bool = True) -> dict:
    """The classic boolean keys when they can say it (one mode, or several in their canonical order),
    else the current `pooling_mode` list."""
    modes = (pooling,) if isinstance(pooling, str) else tuple(pooling)
    if not modes or any(m not in POOLING_MODES for m in modes):
        raise ValueError(f"unknown pooling {modes!r}; expected one of {POOLING_MODES}")
    canonical = tuple(m for m in LEGACY_POOLING_KEYS.values() if m in modes)
    config: dict = {"word_embedding_dimension": dim}
    if canonical == modes:
        config.update({key: mode in modes for key, mode in LEGACY_POOLING_KEYS.items()})
    else:
        config["pooling_mode"] = list(modes)
    if not include_prompt:
        config["include_prompt"] = False
    return config


def dense_config(spec: DenseSpec) -> dict:
    config = {"in_features": spec.in_features, "out_features": spec.out_features, "bias": spec.bias,
              "activation_function": spec.activation}
    return {**config, "use_residual": True} if spec.use_residual else config


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_sentence_transformers_folder(path: str | Path, model, tokenizer, *, spec: FolderSpec, max_length: int,
                                       metadata: dict | None = None, state_dict: dict | None = None,
                                       dense_states: list[dict] | None = None) -> Path:
    """Write `model` (a transformers PreTrainedModel) and `tokenizer` as a sentence-transformers folder
    that embeds as `spec` says (pooling, Dense steps with `dense_states`' weights, prompts).

    `state_dict` overrides the model's own weights — a DeepSpeed run passes its gathered fp32 weights.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, state_dict=state_dict)
    tokenizer.save_pretrained(out)
    modules = modules_json(spec)
    _write_json(out / "modules.json", modules)
    _write_json(out / "1_Pooling" / "config.json",
                pooling_config(model.config.hidden_size, spec.pooling, spec.include_prompt))
    dense = iter(dense_states or [])
    for entry, step in zip(modules[2:], published_steps(spec)):
        (out / entry["path"]).mkdir(exist_ok=True)
        if step != "normalize":
            from safetensors.torch import save_file

            _write_json(out / entry["path"] / "config.json", dense_config(step))
            weights = {k: v.detach().float().cpu().contiguous() for k, v in next(dense).items()}
            save_file(weights, str(out / entry["path"] / "model.safetensors"))
    _write_json(out / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": spec.do_lower_case})
    _write_json(out / "config_sentence_transformers.json", {"prompts": spec.prompts,
                                                           "default_prompt_name": spec.default_prompt_name,
                                                           "similarity_fn_name": "cosine"})
    if metadata is not None:
        _write_json(out / METADATA, metadata)
    return out
