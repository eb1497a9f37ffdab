"""A suite's numbers: each task's report, the macro over a suite's tasks, and the table's columns.

Owns turning per-task `EvalReport`s into the names a user compares runs on, one rule for every
output (CLI JSON, report.json, MLflow, the Table-1 printout):

- `<suite>/<task>/<metric>`: one task's mean (`followir/robust04/p-MRR`, `mair/ifeval/ndcg@10`);
- `<suite>/<metric>`: the plain mean of the suite's task means (`followir/p-MRR`), with a bootstrap
  that resamples queries inside each task and then macro-averages, as the paper averages;
- a one-task suite (a single folder) names its metrics `<task>/<metric>`.

A suite of suites (`paper`) is its parts side by side. It knows nothing about encoders, files or
services: `plan` says which tasks, `suite_report` combines reports someone already has.

    >>> [s.name for s in plan("paper").parts]
    ['followir', 'infosearch', 'mair']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dualview_core.config import EvaluationConfig
from dualview_core.data.catalog import Task, leaf_suites, suite_named, task_named
from dualview_core.evaluation.benchmarks import BENCHMARKS
from dualview_core.evaluation.scoring import EvalReport, as_json
from dualview_core.evaluation.stats import Interval, bootstrap_ci
from dualview_core.keys import digest

PerQuery = dict[str, float]
SCORE_CONVENTION = ("score: the og run against the original qrels, as mteb 2.x scores FollowIR; score_mteb1: "
                    "the og run against the changed qrels, as mteb 1.x did")


@dataclass(frozen=True)
class Part:
    """One suite that holds tasks directly (followir), with the columns it shows."""

    name: str
    title: str
    tasks: tuple[Task, ...]
    columns: Mapping[str, str]  # metric or task/metric -> title

    def key(self, metric: str, task: Task | None = None) -> str:
        if task is None or (len(self.tasks) == 1 and task.name == self.name):
            return f"{self.name}/{metric}"
        return f"{self.name}/{task.key}/{metric}"


@dataclass(frozen=True)
class Plan:
    name: str
    parts: tuple[Part, ...]

    @property
    def tasks(self) -> list[Task]:
        return [t for p in self.parts for t in p.tasks]

    def columns(self) -> dict[str, str]:
        """metric key -> column title, in the table's order."""
        return {f"{p.name}/{c}": title for p in self.parts for c, title in p.columns.items()}


def plan(name: str) -> Plan:
    """The catalog's suite (or task) `name` as parts to evaluate."""
    suite_named(name)  # unknown names fail here, with the catalog's names
    parts = tuple(Part(s.name, s.title, tuple(task_named(t) for t in s.tasks), s.columns or _family_columns(s.tasks))
                  for s in leaf_suites(name))
    return Plan(name, parts)


def single_task_plan(task: Task) -> Plan:
    """One folder evaluated on its own: a suite of one task, named after it."""
    return Plan(task.name, (Part(task.name, task.title, (task,), _family_columns([task.name], task)),))


TITLES = {"p-MRR": "p-MRR", "score": "Score", "score_mteb1": "Score (mteb 1.x)",
          "ndcg@10": "nDCG@10", "ndcg_cut_10": "nDCG@10", "robustness@10": "robustness@10"}


def _family_columns(task_names: list[str], task: Task | None = None) -> dict[str, str]:
    """A suite the catalog gives no columns: its family's headline metrics, per task when several."""
    task = task or task_named(task_names[0])
    headline = BENCHMARKS[task.benchmark].headline
    if len(task_names) == 1:
        return {m: TITLES.get(m, m) for m in headline}
    return {f"{task_named(t).key}/{m}": f"{task_named(t).title} {TITLES.get(m, m)}" for t in task_names for m in headline}


@dataclass
class SuiteReport:
    """A model's results on a suite; quacks like an `EvalReport` where the pipeline reads one."""

    suite: str
    reports: dict[str, EvalReport]  # task name -> its report
    summary: dict[str, Interval]  # metric key -> mean and interval
    per_query: dict[str, PerQuery]  # task-level metric key -> query_id -> value
    groups: dict[str, list[PerQuery]]  # macro metric key -> one per-query dict per task
    columns: dict[str, str]  # metric key -> title, the table's columns
    details: dict[str, object] = field(default_factory=dict)

    @property
    def benchmark(self) -> str:
        return self.suite

    @property
    def subset(self) -> str:
        return self.suite

    @property
    def headline(self) -> tuple[str, ...]:
        return tuple(k for k in self.columns if k in self.summary)

    @property
    def digest(self) -> str:
        return digest("\n".join(f"{t}:{r.digest}" for t, r in sorted(self.reports.items())).encode())

    def as_dict(self, with_per_query: bool = True) -> dict:
        queries = {k: len(v) for k, v in self.per_query.items()} | {k: sum(map(len, g)) for k, g in self.groups.items()}
        out = {
            "suite": self.suite,
            "digest": self.digest,
            "columns": self.columns,
            "metrics": {k: as_json(i, queries.get(k, 0)) for k, i in self.summary.items()},
            "details": self.details,
            "tasks": {t: r.as_dict(with_per_query=False) for t, r in self.reports.items()},
        }
        if with_per_query:  # what `dualview compare` pairs two reports on
            out |= {"per_query": self.per_query, "groups": self.groups}
        return out


def _macro(groups: list[PerQuery], cfg: EvaluationConfig) -> Interval:
    return bootstrap_ci([list(g.values()) for g in groups], cfg.bootstrap_resamples, cfg.bootstrap_seed, cfg.confidence)


def suite_report(p: Plan, reports: Mapping[str, EvalReport], cfg: EvaluationConfig,
                 details: Mapping[str, object] | None = None) -> SuiteReport:
    """Combine the tasks' reports of plan `p` (task name -> report) into the suite's metrics."""
    summary: dict[str, Interval] = {}
    per_query: dict[str, PerQuery] = {}
    groups: dict[str, list[PerQuery]] = {}
    for part in p.parts:
        done = [t for t in part.tasks if t.name in reports]
        for task in done:
            report = reports[task.name]
            for metric, interval in report.summary.items():
                summary[part.key(metric, task)] = interval
                per_query[part.key(metric, task)] = report.per_query.get(metric, {})
        if len(done) > 1:  # the macro: every metric all of the part's tasks report
            shared = set.intersection(*(set(reports[t.name].summary) for t in done))
            for metric in sorted(shared):
                key = part.key(metric)
                groups[key] = [reports[t.name].per_query.get(metric, {}) for t in done]
                summary[key] = _macro(groups[key], cfg)
    details = {"score_convention": SCORE_CONVENTION, "query_template": cfg.query_template, **(details or {})}
    return SuiteReport(p.name, dict(reports), summary, per_query, groups, p.columns(), details)
