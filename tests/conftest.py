"""Fixtures shared by every test folder; the project's environment defaults, applied once.

The layout mirrors the code:

- tests/unit/         dualview_core/ and the pure parts of tasks/ and flows/: hand-made data, seconds
- tests/infra/        infra/, docker/ and prefect.yaml checked offline (tests/infra/test_infra*.py)
- tests/integration/  real local services started and stopped by pid (its conftest: their fixtures)
- tests/gpu/          what needs CUDA; skipped, with the reason, without it
- tests/helpers/      what tests share that is not a fixture (factories, service starters, infra
                      readers); test modules import only from here, never from another test module
                      or a conftest
"""

from __future__ import annotations

import copy

import pytest

from flows.commands import apply_project_env
from tests.helpers.factories import promptriever_row

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
def sample(tmp_path_factory) -> tuple[str, str]:
    """(seeds, dual views) for training tests (integration and gpu): the bundled seeds and one fixture
    dual view per seed (tests/helpers/samples.py), written once per session."""
    from tests.helpers.samples import write_sample_views

    return write_sample_views(tmp_path_factory.mktemp("views"))
