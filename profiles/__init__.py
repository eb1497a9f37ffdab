"""Named run profiles, shipped as package data: one YAML file per profile, each a partial
`PipelineConfig` (fields it leaves out keep their defaults). `dualview_core.profiles` resolves them;
this package only finds and reads the files.

    cpu      this machine: the bundled sample, SmolLM2 on CPU vLLM, MiniLM, SQLite MLflow in .cache/
    cluster  the paper's job on the Kubernetes cluster of infra/ (docs/cluster.md)
"""

from __future__ import annotations

from importlib.resources import files

import yaml


class ProfileError(ValueError):
    """An unknown profile, or a file that is not a mapping of config fields."""


def names() -> tuple[str, ...]:
    return tuple(sorted(p.name.removesuffix(".yaml") for p in files(__package__).iterdir() if p.name.endswith(".yaml")))


def load(name: str) -> dict:
    """The profile's fields as written (nested dicts), without defaults."""
    if name not in names():
        raise ProfileError(f"unknown profile {name!r}; the profiles are {', '.join(names())} (profiles/*.yaml)")
    doc = yaml.safe_load((files(__package__) / f"{name}.yaml").read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        raise ProfileError(f"profiles/{name}.yaml must be a mapping of PipelineConfig fields, not {type(doc).__name__}")
    return doc
