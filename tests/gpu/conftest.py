"""tests/gpu/: what needs CUDA. Without it every test here is skipped, with the reason shown."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: no GPU on this machine (tests/gpu/ runs on a GPU runner)")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
