"""The benchmark catalog: which tasks and suites exist, where each is published, how it is scored.

Owns reading `catalog.yaml` (package data) into typed entries and answering "what is NAME": a task
(one eval set: FollowIR Robust04, InfoSearch length, MAIR IFEval, ...), a suite (tasks whose numbers
are macro-averaged together, or suites of suites: `paper` is the paper's six columns) or a seed set
(Promptriever's training rows). Nothing is inferred from a folder's name: the catalog says which
benchmark family scores a task, its Score measure and which instruction ranks its baseline.
It knows nothing about downloading, encoders or files beyond its own YAML.

    >>> suite_tasks("paper")[:3]
    ['robust04', 'news21', 'core17']
    >>> task_named("news21").score
    'ndcg_cut_5'
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Layout = Literal["mteb2", "followir", "infosearch", "mair", "promptriever"]
Family = Literal["followir", "infosearch", "mair", "instructir"]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Entry):
    """A published dataset on the Hugging Face hub, at a pinned revision."""

    repo: str = Field(description="owner/name of the dataset repository")
    revision: str = Field(description="the commit the project was checked against; never a moving branch")
    layout: Layout | None = None
    config: str | None = Field(None, description="the dataset's subset (a folder or file prefix in the repository)")
    split: str | None = None
    docs: Source | None = Field(None, description="a second repository holding the documents (MAIR)")

    @model_validator(mode="after")
    def _pinned(self) -> Source:
        if self.revision in ("main", "master", ""):
            raise ValueError(f"{self.repo}: pin a revision (a commit), not {self.revision!r}")
        return self


class Task(_Entry):
    name: str
    benchmark: Family = Field(description="the measure family that scores it (evaluation/benchmarks.py)")
    title: str
    score: str | None = Field(None, description="FollowIR's Score measure for this task (pytrec_eval name)")
    baseline: Literal["og", "none"] = Field(
        "og", description="the instruction the baseline run is ranked under: the original one, or none")
    query_template: str | None = Field(None, description="how query and instruction join; None: the evaluation config's")
    optional: bool = Field(False, description="published but not in the paper's table")
    source: Source | None = Field(None, description="None for a folder of the user's own, outside the catalog")
    alternatives: dict[str, Source] = Field(default_factory=dict, description="other publications of the same task")

    @property
    def key(self) -> str:
        """The task's name inside its suite's metric names: 'infosearch-length' -> 'length'."""
        return self.name.removeprefix(f"{self.benchmark}-")


class Suite(_Entry):
    name: str
    title: str
    tasks: list[str] = Field(default_factory=list)
    suites: list[str] = Field(default_factory=list)
    columns: dict[str, str] = Field(default_factory=dict, description="metric or task/metric -> column title")


class SeedSet(_Entry):
    name: str
    title: str
    source: Source


class Catalog(_Entry):
    tasks: dict[str, Task]
    suites: dict[str, Suite]
    seeds: dict[str, SeedSet]

    @model_validator(mode="after")
    def _references(self) -> Catalog:
        names = list(self.tasks) + list(self.suites) + list(self.seeds)
        if len(set(names)) != len(names):
            raise ValueError("catalog names must be unique across tasks, suites and seeds")
        for suite in self.suites.values():
            unknown = [t for t in suite.tasks if t not in self.tasks] + [s for s in suite.suites if s not in self.suites]
            if unknown:
                raise ValueError(f"suite {suite.name} names unknown entries {unknown}")
            families = {self.tasks[t].benchmark for t in suite.tasks}
            if len(families) > 1:
                raise ValueError(f"suite {suite.name} mixes benchmark families {sorted(families)}; make a suite of suites")
        return self


def _with_names(section: dict) -> dict:
    return {name: {"name": name, **fields} for name, fields in (section or {}).items()}


@functools.cache
def catalog() -> Catalog:
    from importlib.resources import files

    import yaml

    doc = yaml.safe_load((files(__package__) / "catalog.yaml").read_text(encoding="utf-8"))
    return Catalog(**{section: _with_names(doc.get(section)) for section in ("tasks", "suites", "seeds")})


def names() -> list[str]:
    c = catalog()
    return sorted(c.tasks) + sorted(c.suites) + sorted(c.seeds)


def _unknown(name: str, kind: str, known) -> ValueError:
    return ValueError(f"unknown {kind} {name!r}; the catalog has {', '.join(sorted(known))}")


def task_named(name: str) -> Task:
    if name not in catalog().tasks:
        raise _unknown(name, "task", catalog().tasks)
    return catalog().tasks[name]


def suite_named(name: str) -> Suite:
    c = catalog()
    if name in c.suites:
        return c.suites[name]
    if name in c.tasks:  # a task on its own is a one-task suite
        task = c.tasks[name]
        return Suite(name=name, title=task.title, tasks=[name])
    raise _unknown(name, "suite", list(c.suites) + list(c.tasks))


def leaf_suites(name: str) -> list[Suite]:
    """The suites that hold tasks directly, in order: paper -> followir, infosearch, mair."""
    suite = suite_named(name)
    out = [suite] if suite.tasks else []
    for part in suite.suites:
        out += leaf_suites(part)
    return out


def suite_tasks(name: str) -> list[str]:
    return [t for s in leaf_suites(name) for t in s.tasks]
