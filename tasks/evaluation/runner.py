"""Evaluation, task side: load -> evaluate (core) -> write runs and report -> log to MLflow.

Owns the I/O around `dualview_core.evaluation.scoring`: TREC run files and report.json in an output folder,
and MLflow logging. `log_evaluation` logs into the run it is given, by id (MLflow's process-wide
"active run" is never touched); opening and closing runs is tasks/tracking/runs.py's job. MLflow and matplotlib
are imported inside the functions that use them, so importing this module stays cheap.

Logged, per eval set (benchmark `followir`, subset `core17`, say):
- metrics `followir/core17/p-MRR`, `…_ci_low`, `…_ci_high`, the same for `score` and
  `score_mteb1`, and the benchmark numbers over all given subsets: `followir/p-MRR`,
  `followir/score`, … (FollowIR: the plain mean of subsets; MAIR: weighted by size);
- a per-query table (`log_table`), a figure of the headline metrics with CI whiskers
  (`log_figure`), the eval set as a dataset input with its content digest (`log_input`).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence

from dualview_core.config import EvaluationConfig
from dualview_core.evaluation.scoring import EvalReport, aggregate, evaluate_model
from dualview_core.method.metrics import CI_HIGH, CI_LOW, QUARANTINED, metric_key
from dualview_core.evaluation.stats import Interval
from dualview_core.data.trec import write_run
from dualview_core.storage.filesystems import filesystem, storage_defaults
from tasks.progress import Progress

REPORT_FILE = "report.json"
EVAL_CONTEXT = "eval"  # MLflow dataset-input context


def run_file(view: str) -> str:
    return f"run_{view}.trec"


def write_outputs(report: EvalReport, out_dir: str, extra: Mapping[str, object] | None = None,
                  storage_options: dict | None = None) -> dict[str, str]:
    """Write one TREC run per view and report.json (with per-query values) into `out_dir` (local or s3://)."""
    import fsspec

    fs, root = filesystem(out_dir, storage_options)
    fs.makedirs(root, exist_ok=True)
    base = out_dir.rstrip("/")
    files = {}
    for view, run in report.runs.items():
        files[view] = f"{base}/{run_file(view)}"
        write_run(files[view], run, tag=f"dualview-{report.subset}", storage_options=storage_options)
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


def evaluate_task(model: str, eval_set_path: str, cfg: EvaluationConfig | None = None, out_dir: str | None = None,
                  benchmark: str | None = None, storage_options: dict | None = None,
                  progress: Progress | None = None, label: str = "evaluate") -> EvalReport:
    """The whole evaluation of one model on one eval set, as a pipeline stage calls it. With
    `progress`, long encodings report texts/s and an ETA there."""
    from dualview_core.model import load_model
    from dualview_core.data.evalsets import load_eval_set

    cfg = cfg or EvaluationConfig()
    load = load_eval_set(eval_set_path, storage_options=storage_options)
    if cfg.strict:
        load.refuse_drops(eval_set_path)
    elif load.quarantined and progress is not None:
        progress(f"{label}: {load.quarantined} rows of {load.eval_set.name} quarantined and left out of the "
                 f"metrics: {load.dropped()} (strict refuses such an eval set)")
    encoder = load_model(model, pooling=cfg.pooling, max_length=cfg.max_length)
    if progress is not None:
        progress(f"{label}: {model} on {load.eval_set.name} ({load.eval_set.corpus.num_rows} docs, "
                 f"{load.eval_set.queries.num_rows} query rows)")
        encoder = MeteredEncoder(encoder, progress, label)
    report = evaluate_model(encoder, load.eval_set, cfg, benchmark)
    report.details.update(source=eval_set_path, quarantined=load.quarantined, dropped=load.dropped())
    if out_dir:
        write_outputs(report, out_dir, {"model": model, "config": cfg.model_dump()}, storage_options)
    return report


# --- MLflow -------------------------------------------------------------------------------------


def metric_values(reports: Sequence[EvalReport], cfg: EvaluationConfig) -> dict[str, float]:
    """Every metric name -> value that `log_evaluation` logs (NaN means undefined and is skipped)."""
    out: dict[str, float] = {}

    def put(benchmark: str, subset: str | None, metric: str, interval: Interval) -> None:
        for suffix, value in (("", interval.mean), (CI_LOW, interval.low), (CI_HIGH, interval.high)):
            if not math.isnan(value):  # an undefined mean (no query) is not a metric
                out[metric_key(benchmark, subset, metric, suffix)] = value

    for report in reports:
        for metric, interval in report.summary.items():
            put(report.benchmark, report.subset, metric, interval)
        if "quarantined" in report.details:  # rows the metrics left out: 0 says none were
            out[metric_key(report.benchmark, report.subset, QUARANTINED)] = float(report.details["quarantined"])
            for table, dropped in report.details.get("dropped", {}).items():
                out[metric_key(report.benchmark, report.subset, f"{QUARANTINED}/{table}")] = float(dropped["rows"])
    for benchmark in sorted({r.benchmark for r in reports}):
        for metric, interval in aggregate([r for r in reports if r.benchmark == benchmark], cfg).items():
            put(benchmark, None, metric, interval)
    return out


def log_evaluation(tracking_uri: str, run_id: str, reports: EvalReport | Sequence[EvalReport],
                   cfg: EvaluationConfig | None = None, artifact_dir: str = "evaluation") -> dict[str, float]:
    """Log metrics with intervals, per-query tables, a CI figure and dataset lineage into run
    `run_id`; return the metrics."""

    from tasks.tracking.mlflow_access import log_datasets, log_metrics, mlflow_client

    reports = [reports] if isinstance(reports, EvalReport) else list(reports)
    cfg = cfg or EvaluationConfig()
    metrics = metric_values(reports, cfg)
    client = mlflow_client(tracking_uri)
    log_metrics(tracking_uri, run_id, metrics)
    for report in reports:
        prefix = f"{artifact_dir}/{report.benchmark}_{report.subset}"
        with warnings.catch_warnings():  # pandas 3 warns inside mlflow's log_table about str columns
            warnings.filterwarnings("ignore", message=".*select_dtypes.*")
            client.log_table(run_id, per_query_table(report), artifact_file=f"{prefix}_per_query.json")
        log_datasets(tracking_uri, run_id, [(f"{report.benchmark}/{report.subset}",
                                             str(report.details.get("source", report.subset)), report.digest, EVAL_CONTEXT)])
        if "score_measure" in report.details:
            client.log_param(run_id, metric_key(report.benchmark, report.subset, "score_measure"), report.details["score_measure"])
    client.log_figure(run_id, ci_figure(reports), f"{artifact_dir}/ci.png")
    return metrics


def per_query_table(report: EvalReport) -> dict[str, list]:
    """Columns: query_id, then one per metric (None where the metric skipped that query)."""
    metrics = list(report.per_query)
    ids = sorted({q for values in report.per_query.values() for q in values})
    return {"query_id": ids, **{m: [report.per_query[m].get(q) for q in ids] for m in metrics}}


def ci_figure(reports: Sequence[EvalReport]):
    """One panel per headline metric: each subset's mean with its bootstrap interval as whiskers."""
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend

    metrics = list(dict.fromkeys(m for r in reports for m in r.headline if m in r.summary))
    fig = Figure(figsize=(4 * max(len(metrics), 1), 3.2), layout="constrained")
    for ax, metric in zip(fig.subplots(1, max(len(metrics), 1), squeeze=False)[0], metrics):
        rows = [(r.subset, r.summary[metric]) for r in reports if metric in r.summary]
        means = [i.mean for _, i in rows]
        whiskers = [[i.mean - i.low for _, i in rows], [i.high - i.mean for _, i in rows]]  # (2, n)
        ax.errorbar(range(len(rows)), means, yerr=whiskers, fmt="o", capsize=4)
        ax.set_xticks(range(len(rows)), [s for s, _ in rows], rotation=30, ha="right")
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_title(metric)
    return fig
