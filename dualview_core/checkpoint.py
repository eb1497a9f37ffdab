"""Checkpoints as sentence-transformers folders, written without sentence-transformers.

Owns the folder layout a trained encoder is published in, so that `SentenceTransformer(path)` —
and mteb through it — loads exactly the model `Encoder(path)` runs:

    config.json, model.safetensors, tokenizer files   the Hugging Face model (save_pretrained)
    modules.json                                      Transformer -> Pooling -> Normalize
    1_Pooling/config.json                             mean or CLS pooling
    sentence_bert_config.json                         max_seq_length
    config_sentence_transformers.json                 cosine similarity, no prompts
    dualview.json                                     how it was trained (config, data digest)

The classic module names and keys are written on purpose: every sentence-transformers release
still reads them (6.x included) and older mteb environments read nothing newer. The model and
tokenizer are duck-typed (`save_pretrained`); this module imports no framework, and uploading the
folder to s3:// is the task's job.
"""

from __future__ import annotations

import json
from pathlib import Path

MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]
METADATA = "dualview.json"


def pooling_config(dim: int, pooling: str) -> dict:
    if pooling not in ("mean", "cls"):
        raise ValueError(f"unknown pooling {pooling!r}; expected mean or cls")
    return {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_sentence_transformers_folder(path: str | Path, model, tokenizer, *, pooling: str, max_length: int,
                                       metadata: dict | None = None, state_dict: dict | None = None) -> Path:
    """Write `model` (a transformers PreTrainedModel) and `tokenizer` as a sentence-transformers folder.

    `state_dict` overrides the model's own weights — a ZeRO-3 run passes the gathered full weights.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, state_dict=state_dict)
    tokenizer.save_pretrained(out)
    _write_json(out / "modules.json", MODULES)
    _write_json(out / "1_Pooling" / "config.json", pooling_config(model.config.hidden_size, pooling))
    (out / "2_Normalize").mkdir(exist_ok=True)
    _write_json(out / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False})
    _write_json(out / "config_sentence_transformers.json", {"prompts": {}, "default_prompt_name": None,
                                                           "similarity_fn_name": "cosine"})
    if metadata is not None:
        _write_json(out / METADATA, metadata)
    return out
