"""Shared fixtures."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

# The Makefile exports these for `make test`; set them here too so a bare `pytest` behaves the same:
# nothing reaches for a hub, and every tool keeps its state inside the project.
_CACHE = Path(__file__).resolve().parents[1] / ".cache"
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HOME": str(_CACHE / "huggingface"),
    "TORCH_EXTENSIONS_DIR": str(_CACHE / "torch_extensions"),
    "PREFECT_HOME": str(_CACHE / "prefect"),
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "DO_NOT_TRACK": "1",
    "MLFLOW_ENABLE_TELEMETRY": "false",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}.items():
    os.environ.setdefault(_name, _value)

from tests.factories import promptriever_row


@pytest.fixture
def rows() -> list[dict]:
    """Three instruct rows and their non-instruct twins."""
    out = []
    for i in range(3):
        out.append(promptriever_row(f"q{i}"))
        out.append(promptriever_row(f"q{i}", instruct=False))
    return copy.deepcopy(out)

