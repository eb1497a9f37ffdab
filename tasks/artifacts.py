"""What a flow run leaves on its Prefect page: tables of its results, a markdown summary, a link to MLflow.

Owns the artifacts' keys, the rows of their tables and the text of their summaries, built from what
the stages already returned — report.json's metrics, the synthesis summary, the training result — and
named as MLflow names the same numbers, so a number on a flow run's *Artifacts* tab is the one its
MLflow run holds. It must not know Prefect: `tasks.stages.publish_artifacts` hands these values to
`prefect.artifacts`, so everything here is a plain function of plain dicts.

Keys are stable per deployment (per flow, for a run outside one), `dualview-<scope>-<kind>`:

    >>> artifact_key("pipeline-k8s", RESULTS)
    'dualview-pipeline-k8s-results'

so Prefect's *Artifacts* page follows each result of a deployment across its runs. Evaluation numbers
are ×100 as everywhere, rounded to `DIGITS` decimals; the tables hold one row per model and metric
(or per measure), a few hundred rows at most for the paper's suite.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from dualview_core.evaluation.headline import DELTA, FINAL_LOSS, P_VALUE, headline_key, training_headline
from dualview_core.method.metrics import CI_HIGH, CI_LOW
from tasks.tracking.mlflow_access import synthesis_metrics
from tasks.training.trainer import LOSS, PEAK_ACCELERATOR_MB, PEAK_RSS_MB, SAMPLES_PER_S, SEPARATION, TOKENS_PER_S

RESULTS, SUMMARY, SYNTHESIS, TRAINING, MLFLOW_RUN = "results", "summary", "synthesis", "training", "mlflow-run"
MODEL_VERSION = "model-version"
DIGITS = 4
DIFFERENCE = "trained-base"  # the label of the paired difference's rows, as the printed table names it
MEAN = "_mean"  # a per-step training signal averaged over the run's steps


@dataclass(frozen=True)
class Table:
    key: str
    rows: list[dict]
    description: str


@dataclass(frozen=True)
class Markdown:
    key: str
    text: str
    description: str


@dataclass(frozen=True)
class Link:
    key: str
    url: str
    text: str
    description: str


Artifact = Table | Markdown | Link


def artifact_key(scope: str, kind: str) -> str:
    """Prefect keys hold lowercase letters, digits and dashes only; anything else becomes a dash."""
    return re.sub(r"[^a-z0-9]+", "-", f"dualview-{scope}-{kind}".lower()).strip("-")


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """The run's page in the MLflow UI of an http(s) tracking server, without any user:password the
    URI carries; None for a local store (SQLite, files), which has no UI until someone starts one.

        >>> mlflow_run_url("http://u:p@mlflow:5000/", "3", "abc")
        'http://mlflow:5000/#/experiments/3/runs/abc'
    """
    parts = urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return None
    base = urlunsplit((parts.scheme, parts.hostname + (f":{parts.port}" if parts.port else ""), parts.path.rstrip("/"), "", ""))
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def links(scope: str, run, registered: Mapping | None = None) -> list[Link]:
    """Links to what a flow run made elsewhere: its MLflow run (`run`: a RunRef) and, when it
    registered the trained model (`registered`: name, version), that version's page."""
    url = mlflow_run_url(run.tracking_uri, run.experiment_id, run.run_id)
    if url is None:
        return []
    out = [Link(artifact_key(scope, MLFLOW_RUN), url, f"MLflow run {run.run_id}",
                "The MLflow run with this flow run's params, metrics, datasets and files.")]
    if registered:
        page = url.split("#/", 1)[0] + f"#/models/{registered['name']}/versions/{registered['version']}"
        out.append(Link(artifact_key(scope, MODEL_VERSION), page, f"{registered['name']} version {registered['version']}",
                        "The registered model version this run trained, with its evaluation as tags."))
    return out


# --- table rows -----------------------------------------------------------------------------------


def _number(value: float | int | None) -> float | int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value if isinstance(value, int) else round(float(value), DIGITS)


def _rectangular(rows: list[dict]) -> list[dict]:
    """Every row with every column (None where a row has none): the table's columns are its rows' keys."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: r.get(k) for k in columns} for r in rows]


def evaluation_rows(reports: Mapping[str, Mapping], headline: Mapping[str, float] | None = None) -> list[dict]:
    """One row per model and metric: `reports` maps a label to report.json's shape (its `metrics`:
    key -> {value, ci_low, ci_high, queries}, every task's and every suite's key). With the pipeline's
    `headline`, also a `trained-base` row per column it compares, with its paired interval and p-value."""
    rows = [{"model": label, "metric": key, "value": _number(m.get("value")), "ci_low": _number(m.get("ci_low")),
             "ci_high": _number(m.get("ci_high")), "queries": m.get("queries")}
            for label, report in reports.items() for key, m in report["metrics"].items()]
    keys = dict.fromkeys(k for report in reports.values() for k in report["metrics"])
    for key in keys if headline else ():
        if (value := headline.get(headline_key(DELTA, key))) is not None:
            rows.append({"model": DIFFERENCE, "metric": key, "value": _number(value),
                         **{name: _number(headline.get(headline_key(DELTA, key, suffix)))
                            for name, suffix in (("ci_low", CI_LOW), ("ci_high", CI_HIGH), ("p_value", P_VALUE))}})
    return _rectangular(rows)


def synthesis_rows(summary: Mapping) -> list[dict]:
    """The numbers the synthesize MLflow run logs, as (measure, value): the current seeds' outcomes
    first (dual views, rejected, `outcomes/<reason>`), then this run's plan and cost (engine rows,
    `rejections/<reason>`, tokens, seconds)."""
    metrics = synthesis_metrics(summary)
    first = ("synthesis/dual_views", "synthesis/rejected", "synthesis/outcomes/", "synthesis/quarantined_seeds")
    order = sorted(metrics, key=lambda k: next((i for i, p in enumerate(first) if k.startswith(p)), len(first)))
    return [{"measure": k, "value": _number(metrics[k])} for k in order]


def training_rows(trained: Mapping) -> list[dict]:
    """Steps, final loss, seconds, throughput (per-step samples/s and tokens/s averaged over the
    steps), peak host and accelerator memory (the largest over the steps), the last instruction
    separation, then the mixture's composition."""
    history = trained.get("history", [])
    out = training_headline(history, trained["steps"], LOSS) | {"train/seconds": trained.get("seconds")}
    for key in (SAMPLES_PER_S, TOKENS_PER_S):
        if values := [r[key] for r in history if key in r]:
            out[key + MEAN] = sum(values) / len(values)
    for key in (PEAK_RSS_MB, PEAK_ACCELERATOR_MB):
        if values := [r[key] for r in history if key in r]:
            out[key] = max(values)
    if separations := [r[SEPARATION] for r in history if SEPARATION in r]:
        out[SEPARATION] = separations[-1]
    composition = trained.get("composition", {})
    out |= {f"mixture/{k}": v for k, v in composition.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    out |= {f"mixture/by_source/{k}": v for k, v in composition.get("by_source", {}).items()}
    return [{"measure": k, "value": v if isinstance(v, str) else _number(v)} for k, v in out.items() if v is not None]


# --- markdown -------------------------------------------------------------------------------------


def _cell(value: float | None, low: float | None = None, high: float | None = None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if low is None or high is None else f"{value:.2f} [{low:.2f}, {high:.2f}]"


def columns_markdown(reports: Mapping[str, Mapping], headline: Mapping[str, float] | None = None) -> str:
    """The suite's columns (the printed table's) as a markdown table: a row per model, `mean [low,
    high]`; with the pipeline's headline a `trained-base` row with its p-values."""
    columns = {k: v for report in reports.values() for k, v in report.get("columns", {}).items()}
    lines = ["| model | " + " | ".join(columns.values()) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, report in reports.items():
        metrics = report["metrics"]
        lines.append(f"| {label} | " + " | ".join(
            _cell(*(metrics.get(k, {}).get(f) for f in ("value", "ci_low", "ci_high"))) for k in columns) + " |")
    if headline and any(headline_key(DELTA, k) in headline for k in columns):
        def delta(k: str) -> str:
            got = [headline.get(headline_key(DELTA, k, s)) for s in ("", CI_LOW, CI_HIGH, P_VALUE)]
            return _cell(*got[:3]) + ("" if got[3] is None else f" (p {got[3]:.3f})")
        lines.append(f"| {DIFFERENCE} | " + " | ".join(delta(k) for k in columns) + " |")
    return "\n".join(lines)


def synthesis_markdown(summary: Mapping) -> str:
    by_reason = summary.get("outcomes", {}).get("by_reason", {})
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(by_reason.items(), key=lambda kv: -kv[1])) or "none"
    cost, plan = summary["cost"], summary["plan"]
    return (f"**Synthesis** into `{summary['out']}` with `{summary['model_id']}` (prompt {summary['prompt_version']}): "
            f"{summary['dual_views']} dual views accepted, {summary['rejected']} rejected ({reasons}) over the current "
            f"seeds. This run sent {cost['engine_rows']} rows to the engine ({cost['prompt_tokens']} prompt + "
            f"{cost['completion_tokens']} completion tokens, {cost['wall_seconds']:.1f} s); {plan['cached']} answers "
            f"came from the cache.")


def training_markdown(trained: Mapping) -> str:
    values = {r["measure"]: r["value"] for r in training_rows(trained)}
    loss, speed = values.get(FINAL_LOSS), values.get(SAMPLES_PER_S + MEAN)
    return (f"**Training** of mixture `{values.get('mixture/mixture', '?')}` ({values.get('mixture/rows', '?')} rows): "
            f"{trained['steps']} optimizer steps in {trained.get('seconds', 0):.1f} s, final loss "
            f"{'n/a' if loss is None else f'{loss:.4f}'}, {'n/a' if speed is None else f'{speed:.1f}'} samples/s. "
            f"Checkpoint: `{trained['checkpoint']}`.")


def _mlflow_line(run) -> str:
    url = mlflow_run_url(run.tracking_uri, run.experiment_id, run.run_id)
    if url:
        return f"[MLflow run {run.run_id}]({url}), experiment {run.experiment_id}."
    return (f"MLflow run `{run.run_id}`, experiment {run.experiment_id}, in a local store: "
            f"`mlflow ui --backend-store-uri {run.tracking_uri}` opens it.")


def _summary(scope: str, title: str, parts: Sequence[str]) -> Markdown:
    return Markdown(artifact_key(scope, SUMMARY), "\n\n".join([f"# {title}", *parts]), f"What this {scope} run did.")


# --- a flow's artifacts ---------------------------------------------------------------------------


def evaluate_artifacts(scope: str, model: str, report: Mapping, out: str, run) -> list[Artifact]:
    """`report`: the evaluate flow's report.json dict, written to the folder `out`."""
    text = [columns_markdown({model: report}), f"Every metric is in the `{artifact_key(scope, RESULTS)}` table; "
            f"report.json and the runs are in `{out}`.",
            _mlflow_line(run)]
    return [Table(artifact_key(scope, RESULTS), evaluation_rows({model: report}),
                  f"{model} on suite {report['suite']}: every task's and suite's metric, ×100, 95% interval."),
            _summary(scope, f"Evaluation of `{model}` on suite `{report['suite']}`", text), *links(scope, run)]


def synthesize_artifacts(scope: str, summary: Mapping) -> list[Artifact]:
    return [Table(artifact_key(scope, RESULTS), synthesis_rows(summary),
                  "Dual views and rejections by reason over the current seeds; this run's plan, tokens and seconds."),
            _summary(scope, "Synthesis", [synthesis_markdown(summary)])]


def train_artifacts(scope: str, trained: Mapping, run, registered: Mapping | None = None) -> list[Artifact]:
    return [Table(artifact_key(scope, RESULTS), training_rows(trained), "Steps, final loss, throughput, the mixture."),
            _summary(scope, "Training", [training_markdown(trained), _mlflow_line(run)]), *links(scope, run, registered)]


def pipeline_artifacts(scope: str, run, synthesis: Mapping, trained: Mapping, reports: Mapping[str, Mapping],
                       headline: Mapping[str, float], registered: Mapping | None = None) -> list[Artifact]:
    """`reports`: label (base, trained) -> report.json dict; `headline`: what the parent run logged."""
    suite = next(iter(reports.values()))["suite"]
    text = [f"Suite `{suite}` (×100, 95% intervals):", columns_markdown(reports, headline),
            synthesis_markdown(synthesis), training_markdown(trained), _mlflow_line(run)]
    return [Table(artifact_key(scope, RESULTS), evaluation_rows(reports, headline),
                  "Base and trained model on every task's and suite's metric, and their paired difference."),
            Table(artifact_key(scope, SYNTHESIS), synthesis_rows(synthesis), "The synthesis stage's numbers."),
            Table(artifact_key(scope, TRAINING), training_rows(trained), "The training stage's numbers."),
            _summary(scope, "Pipeline", text), *links(scope, run, registered)]


def sweep_artifacts(scope: str, run, synthesis: Mapping, base: Mapping, points: Sequence[Mapping]) -> list[Artifact]:
    """`base`: the base model's report.json dict; `points`: the grid points, each with its `name` and
    report.json `metrics`."""
    reports = {"base": base} | {p["name"]: {"metrics": p["metrics"], "columns": base.get("columns", {})} for p in points}
    text = [f"Suite `{base['suite']}` per grid point (×100, 95% intervals):", columns_markdown(reports),
            synthesis_markdown(synthesis), _mlflow_line(run)]
    return [Table(artifact_key(scope, RESULTS), evaluation_rows(reports),
                  "The base model and each grid point on every task's and suite's metric."),
            Table(artifact_key(scope, SYNTHESIS), synthesis_rows(synthesis), "The synthesis stage's numbers."),
            _summary(scope, "Sweep", text), *links(scope, run)]
