"""Shared fixtures."""

from __future__ import annotations

import copy

import pytest

from flows.commands import apply_project_env
from tests.factories import promptriever_row

# The same defaults the CLI applies: nothing reaches for a hub, every tool keeps its state in the project.
apply_project_env()


@pytest.fixture
def rows() -> list[dict]:
    """Three instruct rows and their non-instruct twins."""
    out = []
    for i in range(3):
        out.append(promptriever_row(f"q{i}"))
        out.append(promptriever_row(f"q{i}", instruct=False))
    return copy.deepcopy(out)



@pytest.fixture(scope="session")
def st_folders(tmp_path_factory) -> dict:
    """variant -> a model folder saved by sentence-transformers 6.2 (tests/st_folders.py), each built
    once per session, on first use."""
    from tests.st_folders import Folders

    return Folders(tmp_path_factory.mktemp("st-folders"))
