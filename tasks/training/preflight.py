"""The pre-flight check of a training run: will one step fit in the memory a rank has?

Owns the measurements the core's estimate (`dualview_core.training.memory`) is compared with, read before any
data or model is loaded: the model's shape from its config.json and the header of its safetensors
file (a few KB, never the weights), and the memory available — on CPU the kernel's MemAvailable
(/proc/meminfo) shared by the ranks of this machine, on GPU `torch.cuda.mem_get_info` of the device.
A run that cannot fit is refused with `MemoryShortfall` (one line, naming the flag to change), not
left to the OOM killer.

`DUALVIEW_AVAILABLE_MEMORY` (bytes, or with a unit: `2GiB`, `512MB`) replaces the measured memory —
for tests of the refusal and for sharing a machine with other jobs; read here, at the edge.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

from dualview_core.config import TrainingConfig
from dualview_core.training.ds_config import precision
from dualview_core.training.memory import ModelShape, shortfall, step_memory

AVAILABLE_ENV = "DUALVIEW_AVAILABLE_MEMORY"
UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30}


class MemoryShortfall(ValueError):
    """A training step would not fit in the memory a rank has."""


def parse_bytes(text: str) -> int:
    """
    >>> parse_bytes("2GiB"), parse_bytes("1.5 GB"), parse_bytes("1000")
    (2147483648, 1500000000, 1000)
    """
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise ValueError(f"{AVAILABLE_ENV}={text!r}: expected bytes, e.g. 8GiB or 8000000000")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def _parameters(folder: Path) -> int | None:
    """Parameter count from the safetensors header (shapes only), or None without such a file."""
    total = 0
    files = sorted(folder.glob("*.safetensors"))
    for f in files:
        with open(f, "rb") as stream:
            (size,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(size))
        for name, meta in header.items():
            if name != "__metadata__":
                n = 1
                for d in meta["shape"]:
                    n *= d
                total += n
    return total if files else None


def model_shape(model: str) -> ModelShape | None:
    """The shape of a local model folder; None for a hub id or a folder without config/weights
    (the check is then skipped: nothing to estimate from without downloading)."""
    from dualview_core.model import resolve_model

    folder = Path(resolve_model(model))
    config = folder / "config.json"
    if not config.is_file():
        return None
    c = json.loads(config.read_text())
    params = _parameters(folder)
    needed = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
    if params is None or not all(k in c for k in needed):
        return None
    return ModelShape(params, c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["intermediate_size"])


def available_memory(device: str, local_ranks: int) -> tuple[int, str]:
    """(bytes one rank may use, where they are): the override, a GPU's free memory, or this
    machine's MemAvailable split between its ranks."""
    if override := os.environ.get(AVAILABLE_ENV):
        return parse_bytes(override), f"{AVAILABLE_ENV}"
    if device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info()
        return free, "the GPU"
    meminfo = Path("/proc/meminfo").read_text()
    kib = int(re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.M).group(1))
    where = "this machine" if local_ranks == 1 else f"each of this machine's {local_ranks} ranks"
    return kib * 1024 // max(1, local_ranks), where


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_memory(cfg: TrainingConfig, world: int, local_ranks: int | None = None) -> None:
    """Raise MemoryShortfall when a step cannot fit; return quietly when it can or when the model
    is not a local folder."""
    shape = model_shape(cfg.model)
    if shape is None:
        return
    device = _device()
    need = step_memory(shape, grad_cache_chunk=cfg.grad_cache_chunk, batch_size=cfg.batch_size,
                       negatives=cfg.negatives, max_length=cfg.max_length, precision=precision(cfg, device),
                       zero_stage=cfg.zero_stage, world=world)
    ranks_here = local_ranks if local_ranks is not None else (1 if device == "cuda" else world)
    available, where = available_memory(device, ranks_here)
    if line := shortfall(need, available, where=where, grad_cache_chunk=cfg.grad_cache_chunk,
                         max_length=cfg.max_length):
        raise MemoryShortfall(line)
