"""Evaluation, task side: find the suite's folders -> load -> evaluate (core) -> write runs and report -> log to MLflow.

Owns the I/O around `dualview_core.evaluation` (scoring one task, `suites` combining them): which
folder holds which catalog task, TREC run files and report.json in an output folder, and MLflow
logging. `log_evaluation` logs into the run it is given, by id (MLflow's process-wide
"active run" is never touched); opening and closing runs is tasks/tracking/runs.py's job. MLflow and matplotlib
are imported inside the functions that use them, so importing this module stays cheap.

Logged, for suite `followir` (say):
- metrics named as `suites` names them: `followir/robust04/p-MRR`, `followir/p-MRR` (the macro over
  its tasks), each with `_ci_low` and `_ci_high`; `score` (mteb 2.x's convention) and `score_mteb1`;
- params: the suite, the Score convention, the query template, each task's Score measure;
- a per-query table per task (`log_table`), a figure of the suite's columns with CI whiskers
  (`log_figure`), each task's eval set as a dataset input with its content digest (`log_input`).
"""

from __future__ import annotations

import json
import math
import posixpath
import warnings
from collections.abc import Mapping

from dualview_core.config import EvaluationConfig
from dualview_core.data.catalog import Task, task_named
from dualview_core.evaluation.benchmarks import BASELINE, SCORE_MEASURE, detect_benchmark
from dualview_core.evaluation.retrieval import SharedDocuments
from dualview_core.evaluation.scoring import evaluate_model
from dualview_core.evaluation.suites import Plan, SuiteReport, plan, single_task_plan, suite_report
from dualview_core.evaluation.scoring import EvalReport
from dualview_core.method.metrics import CI_HIGH, CI_LOW, QUARANTINED
from dualview_core.data.trec import write_run
from dualview_core.storage.filesystems import SourceError, filesystem, storage_defaults
from tasks.progress import Progress

REPORT_FILE = "report.json"
SOURCE_FILE = "_manifest.json"  # what `dualview data get` writes into each task's folder: its catalog name, repo, revision
EVAL_CONTEXT = "eval"  # MLflow dataset-input context


def run_file(view: str) -> str:
    return f"run_{view}.trec"


def write_outputs(report: SuiteReport, out_dir: str, extra: Mapping[str, object] | None = None,
                  storage_options: dict | None = None) -> dict[str, str]:
    """Write one TREC run per task and view (`<task>/run_<view>.trec`; a one-task suite's at the top)
    and report.json (with per-query values) into `out_dir` (local or s3://)."""
    import fsspec

    fs, root = filesystem(out_dir, storage_options)
    fs.makedirs(root, exist_ok=True)
    base = out_dir.rstrip("/")
    files = {}
    single = len(report.reports) == 1
    for task, task_report in report.reports.items():
        folder = base if single else f"{base}/{task}"
        for view, run in task_report.runs.items():
            files[view if single else f"{task}/{view}"] = path = f"{folder}/{run_file(view)}"
            write_run(path, run, tag=f"dualview-{task}", storage_options=storage_options)
    files["report"] = f"{base}/{REPORT_FILE}"
    with fsspec.open(files["report"], "w", encoding="utf-8", **storage_defaults(files["report"], storage_options)) as f:
        f.write(json.dumps({**report.as_dict(), **(extra or {})}, indent=2, ensure_ascii=False))
    return files


class MeteredEncoder:
    """An encoder whose `encode_query` / `encode_document` report progress (texts/s, ETA) on calls
    of at least `min_texts`.

    Texts are sorted by length once for the whole call and encoded in blocks of `block`, so the
    padding stays as small as the inner encoder's own length sort makes it; results come back in
    the caller's order.
    """

    def __init__(self, encoder, progress: Progress, label: str = "evaluate", block: int = 1024,
                 min_texts: int = 256):
        self.encoder, self.progress, self.label, self.block, self.min_texts = encoder, progress, label, block, min_texts

    def encode_query(self, texts: list[str], batch_size: int = 64):
        return self._metered(self.encoder.encode_query, "queries", texts, batch_size)

    def encode_document(self, texts: list[str], batch_size: int = 64):
        return self._metered(self.encoder.encode_document, "documents", texts, batch_size)

    def _metered(self, encode, what: str, texts: list[str], batch_size: int):
        import numpy as np

        if len(texts) < self.min_texts:
            return encode(texts, batch_size=batch_size)
        from tasks.progress import Meter

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        meter = Meter(f"{self.label}: encoding {what}", len(texts), "texts", self.progress, every_s=10.0)
        parts = []
        for start in range(0, len(order), self.block):
            parts.append(encode([texts[i] for i in order[start : start + self.block]], batch_size=batch_size))
            meter.advance(len(parts[-1]))
        encoded = np.concatenate(parts)  # (len(texts), dim), in length order
        out = np.empty_like(encoded)
        out[order] = encoded
        return out


def evaluation_plan(path: str, cfg: EvaluationConfig, storage_options: dict | None = None,
                    benchmark: str | None = None) -> tuple[Plan, dict[str, str]]:
    """(what to evaluate, task name -> its folder). With `cfg.suite`, `path` holds one folder per task
    (what `dualview data get` writes) and a missing one is refused in one line, before any encoding;
    without, `path` is one task's folder: the catalog's task its _manifest.json names, or a task of
    the user's own, scored by the family its layout shows and the default Score measure."""
    fs, root = filesystem(path, storage_options)
    base = path.rstrip("/")
    if cfg.suite:
        p = plan(cfg.suite)
        folders = {t.name: f"{base}/{t.name}" for t in p.tasks}
        missing = [t for t, folder in folders.items() if not fs.isdir(filesystem(folder, storage_options)[1])]
        if missing:
            raise SourceError(f"{path}: no folder for {', '.join(missing)} of suite {cfg.suite}; expected "
                              f"<path>/<task>/ for each of its tasks (fetch them: dualview data get {cfg.suite} --to {path})")
        return p, folders
    return single_task_plan(folder_task(path, storage_options, benchmark)), {}


def folder_task(path: str, storage_options: dict | None = None, benchmark: str | None = None) -> Task:
    """The task one folder holds: named in its _manifest.json (written by `dualview data get`), else
    the user's own, named after the folder."""
    from dualview_core.data.catalog import catalog
    from dualview_core.data.evalsets import load_eval_set

    fs, root = filesystem(path, storage_options)
    manifest = f"{root.rstrip('/')}/{SOURCE_FILE}"
    if fs.isfile(manifest):
        name = json.loads(fs.cat_file(manifest)).get("name")
        if name in catalog().tasks:
            return task_named(name)
    name = posixpath.basename(root.rstrip("/"))
    family = benchmark or detect_benchmark(load_eval_set(path, storage_options=storage_options).eval_set)
    return Task(name=name, benchmark=family, title=name)


def evaluate_task(model: str, eval_set_path: str, cfg: EvaluationConfig | None = None, out_dir: str | None = None,
                  benchmark: str | None = None, storage_options: dict | None = None,
                  progress: Progress | None = None, label: str = "evaluate") -> SuiteReport:
    """The whole evaluation of one model on a suite (or one folder), as a pipeline stage calls it.
    The model is loaded once; a document shared by two tasks is encoded once. With `progress`,
    long encodings report texts/s and an ETA there."""
    from dualview_core.model import load_model, placement

    cfg = cfg or EvaluationConfig()
    p, folders = evaluation_plan(eval_set_path, cfg, storage_options, benchmark)
    loads = {t.name: _load(folders.get(t.name, eval_set_path), cfg, storage_options, progress, label) for t in p.tasks}
    device, precision = placement(cfg.device, cfg.precision)
    encoder = load_model(model, pooling=cfg.pooling, max_length=cfg.max_length, device=device, precision=precision)
    if progress is not None:
        encoder = MeteredEncoder(encoder, progress, label)
    shared = SharedDocuments(encoder)
    reports = {}
    for task in p.tasks:
        load = loads[task.name]
        es = load.eval_set
        es.meta[SCORE_MEASURE] = task.score or cfg.default_score_measure
        es.meta[BASELINE] = task.baseline
        if progress is not None:
            progress(f"{label}: {model} on {task.name} ({es.corpus.num_rows} docs, {es.queries.num_rows} query rows)")
        task_cfg = cfg if task.query_template is None else cfg.model_copy(update={"query_template": task.query_template})
        report = evaluate_model(shared, es, task_cfg, task.benchmark)
        report.details.update(source=folders.get(task.name, eval_set_path), quarantined=load.quarantined,
                              dropped=load.dropped(), query_template=task_cfg.query_template, task=task.name)
        reports[task.name] = report
    dropped = {name: loads[name].dropped() for name in reports if loads[name].quarantined}
    details = {"data": eval_set_path, "query_template": cfg.query_template, "documents_encoded": shared.encoded,
               "device": device, "precision": precision,
               "quarantined": sum(loads[name].quarantined for name in reports), "dropped": dropped}
    report = suite_report(p, reports, cfg, details)
    if out_dir:
        write_outputs(report, out_dir, {"model": model, "config": cfg.model_dump()}, storage_options)
    return report


def _load(path: str, cfg: EvaluationConfig, storage_options, progress, label):
    from dualview_core.data.evalsets import load_eval_set

    load = load_eval_set(path, storage_options=storage_options)
    if cfg.strict:
        load.refuse_drops(path)
    elif load.quarantined and progress is not None:
        progress(f"{label}: {load.quarantined} rows of {load.eval_set.name} quarantined and left out of the "
                 f"metrics: {load.dropped()} (strict refuses such an eval set)")
    return load


# --- MLflow -------------------------------------------------------------------------------------


def metric_values(report: SuiteReport) -> dict[str, float]:
    """Every metric name -> value that `log_evaluation` logs: the suite's keys with `_ci_low` /
    `_ci_high`, and per task the rows its eval set quarantined (`quarantined/<task>`, 0 says none).
    NaN means undefined and is skipped."""
    out: dict[str, float] = {}
    for key, interval in report.summary.items():
        for suffix, value in (("", interval.mean), (CI_LOW, interval.low), (CI_HIGH, interval.high)):
            if not math.isnan(value):  # an undefined mean (no query) is not a metric
                out[key + suffix] = value
    for task, task_report in report.reports.items():
        if "quarantined" in task_report.details:
            out[f"{QUARANTINED}/{task}"] = float(task_report.details["quarantined"])
            for table, dropped in task_report.details.get("dropped", {}).items():
                out[f"{QUARANTINED}/{task}/{table}"] = float(dropped["rows"])
    return out


def log_evaluation(tracking_uri: str, run_id: str, report: SuiteReport, artifact_dir: str = "evaluation") -> dict[str, float]:
    """Log metrics with intervals, per-query tables, a figure of the columns, the conventions and
    each task's eval set as a dataset input into run `run_id`; return the metrics."""

    from tasks.tracking.mlflow_access import log_datasets, log_metrics, mlflow_client

    metrics = metric_values(report)
    client = mlflow_client(tracking_uri)
    log_metrics(tracking_uri, run_id, metrics)
    params = {"eval/suite": report.suite, "eval/score_convention": report.details.get("score_convention", ""),
              "eval/query_template": report.details.get("query_template", ""),
              "eval/device": report.details.get("device", ""), "eval/precision": report.details.get("precision", "")}
    for task, task_report in report.reports.items():
        with warnings.catch_warnings():  # pandas 3 warns inside mlflow's log_table about str columns
            warnings.filterwarnings("ignore", message=".*select_dtypes.*")
            client.log_table(run_id, per_query_table(task_report), artifact_file=f"{artifact_dir}/{task}_per_query.json")
        log_datasets(tracking_uri, run_id, [(f"{task_report.benchmark}/{task}", str(task_report.details.get("source", task)),
                                             task_report.digest, EVAL_CONTEXT)])
        if "score_measure" in task_report.details:
            params[f"eval/{task}/score_measure"] = task_report.details["score_measure"]
    for name, value in params.items():
        client.log_param(run_id, name, str(value)[:6000])
    client.log_figure(run_id, ci_figure(report), f"{artifact_dir}/ci.png")
    return metrics


def per_query_table(report: EvalReport) -> dict[str, list]:
    """Columns: query_id, then one per metric (None where the metric skipped that query)."""
    metrics = list(report.per_query)
    ids = sorted({q for values in report.per_query.values() for q in values})
    return {"query_id": ids, **{m: [report.per_query[m].get(q) for q in ids] for m in metrics}}


def ci_figure(report: SuiteReport):
    """The suite's columns, each mean with its bootstrap interval as whiskers."""
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend

    keys = list(report.headline)
    fig = Figure(figsize=(max(4.0, 1.3 * len(keys) + 1), 3.2), layout="constrained")
    ax = fig.subplots()
    means = [report.summary[k].mean for k in keys]
    whiskers = [[report.summary[k].mean - report.summary[k].low for k in keys],
                [report.summary[k].high - report.summary[k].mean for k in keys]]  # (2, n)
    ax.errorbar(range(len(keys)), means, yerr=whiskers, fmt="o", capsize=4)
    ax.set_xticks(range(len(keys)), [report.columns.get(k, k) for k in keys], rotation=30, ha="right")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_title(report.suite)
    return fig
