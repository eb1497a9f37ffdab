"""The bundled sample: data files shipped inside this package (no download), and where they are.

- `seeds.jsonl`: Promptriever-format instruct rows across a dozen topics, each with one positive,
  several hard negatives and 1-3 instruction negatives, plus the matching non-instruct rows.
- `followir-sample/`: a FollowIR-format eval set (original layout) whose changed instructions really turn
  some relevant documents non-relevant, with top-ranked candidate lists.

All of it was written for this project; it is small, for demos and tests, not for measuring models.
A data package at the bottom of the core: it imports nothing from the project.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

_ROOT = Path(str(files(__package__)))


def seeds_path() -> str:
    return str(_ROOT / "seeds.jsonl")


def followir_path() -> str:
    return str(_ROOT / "followir-sample")
