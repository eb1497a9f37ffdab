"""`dualview score`, `dualview evaluate`, `dualview compare`: the evaluation commands.

- `score` scores any system's TREC runs (og and changed) like trec_eval would, plus p-MRR;
- `evaluate` runs a model on a catalog suite (`--suite paper --data DIR`) or one eval-set folder
  and prints every task's numbers and the suite's macro values, with bootstrap intervals; the model
  may be a registered one (`models:/NAME/VERSION`, `models:/NAME@ALIAS`) on MLFLOW_TRACKING_URI;
- `compare` pairs two systems query by query (per task; stratified by task for a suite's macro)
  and prints p-values, and for `evaluate --out` reports the suite's table (Table 1 for `paper`).
All print JSON on stdout (tables go to stderr); values are ×100, as the benchmarks report them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from dualview_core.config import EvaluationConfig
from dualview_core.method.metrics import MAP_1000, NDCG_5, NDCG_10, SCALE
from dualview_core.config.base import POOLING_MODES
from dualview_core.data.sources import SourceError
from tasks.evaluation.summary import comparison_table
from flows.commands import EXIT_OK, EXIT_UNUSABLE, add_endpoint_flag, print_json, storage_options

DEFAULTS = EvaluationConfig()


def _config(args: argparse.Namespace, **overrides) -> EvaluationConfig:
    return EvaluationConfig(bootstrap_resamples=args.resamples, bootstrap_seed=args.seed, **overrides)


def _check_measures(measures: list[str]) -> None:
    from dualview_core.method.metrics import pytrec_measure

    for m in measures:
        try:
            pytrec_measure(m)
        except ValueError as exc:
            raise SourceError(str(exc).split(";")[0]) from None


def cmd_score(args: argparse.Namespace) -> int:
    from dualview_core.evaluation.scoring import score_runs
    from dualview_core.data.trec import read_qrels, read_run

    _check_measures(args.measures)
    qrels_og, qrels_changed = read_qrels(args.qrels_og), read_qrels(args.qrels_changed)
    run_og = read_run(args.run_og, qrels_og, known_label=args.qrels_og)
    run_changed = read_run(args.run_changed, qrels_changed, known_label=args.qrels_changed)
    result = score_runs(qrels_og, qrels_changed, run_og, run_changed, args.measures, _config(args), args.changed_rule)
    print_json({**result, "changed_rule": args.changed_rule,
                "files": {k: getattr(args, k) for k in ("qrels_og", "qrels_changed", "run_og", "run_changed")}})
    return EXIT_OK


def registered_model(uri: str) -> tuple[str, dict]:
    """(the local folder of a `models:/` URI, {name, version} it named), from the tracking server in
    MLFLOW_TRACKING_URI, else the store the flows use by default. SourceError (one line, exit 2) for a
    name, version or alias the registry lacks, and for a server that refuses our credentials."""
    import os

    from dualview_core.config import PipelineConfig
    from tasks.tracking.mlflow_access import TrackingAccessError
    from tasks.tracking.registry import fetch_registered

    tracking_uri = os.environ.get("MLFLOW_TRACKING_URI") or PipelineConfig.model_fields["tracking_uri"].default
    try:
        local, version = fetch_registered(uri, tracking_uri)
    except TrackingAccessError as exc:
        raise SourceError(str(exc)) from None
    return local, {"name": version.name, "version": version.version}


def cmd_evaluate(args: argparse.Namespace) -> int:
    from dualview_core.model import resolve_model
    from tasks.evaluation.runner import evaluate_task
    from tasks.tracking.registry import is_models_uri

    model, registered = args.model, None
    if is_models_uri(args.model):
        model, registered = registered_model(args.model)
    if not Path(resolve_model(model)).is_dir():
        raise SourceError(f"{args.model}: no such model folder (a Hugging Face or sentence-transformers folder, or 'minilm')")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise SourceError(f"{args.out}: exists and is not a folder (--out takes a folder for the runs and report.json)")
    if bool(args.suite) == bool(args.eval_set) or bool(args.suite) != bool(args.data):
        raise SourceError("evaluate takes --suite NAME --data DIR (a folder `dualview data get NAME --to DIR` wrote), "
                          "or --eval-set FOLDER (one task)")
    from pydantic import ValidationError

    from dualview_core.model import placement

    try:
        cfg = _config(args, batch_size=args.batch_size, max_length=args.max_length, top_k=args.top_k, suite=args.suite,
                      search=args.search, query_template=args.query_template, pooling=args.pooling, strict=args.strict,
                      device=args.device, precision=args.precision)
        placement(cfg.device, cfg.precision)  # a device this machine lacks: refused before anything loads
    except ValidationError as exc:
        raise SourceError("; ".join(f"--{'-'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    if args.mlflow_experiment:  # a server that refuses our credentials: say so before the evaluation, not after
        import mlflow

        from tasks.tracking.mlflow_access import TrackingAccessError, check_tracking_access

        try:
            check_tracking_access(mlflow.get_tracking_uri())
        except TrackingAccessError as exc:
            print(f"dualview: error: {exc}", file=sys.stderr)
            return EXIT_UNUSABLE
    start = time.perf_counter()
    data = args.data or args.eval_set
    report = evaluate_task(model, data, cfg, args.out, args.benchmark, storage_options(args),
                           progress=lambda line: print(line, file=sys.stderr))
    if args.mlflow_experiment:
        _log_to_mlflow(report, args.mlflow_experiment)
    print(comparison_table({args.model: report}), file=sys.stderr)
    summary = report.as_dict(with_per_query=False)
    named = {"registered_model": registered} if registered else {}
    print_json({"model": args.model, **named, "data": data, **summary, "out": args.out,
                "seconds": round(time.perf_counter() - start, 2)})
    return EXIT_OK


def _log_to_mlflow(report, experiment: str) -> None:
    """A run of its own in `experiment`, on the tracking URI MLflow reads from the environment."""
    import mlflow

    from tasks.evaluation.runner import log_evaluation
    from tasks.tracking.mlflow_access import close_run, experiment_id, open_run

    uri = mlflow.get_tracking_uri()
    # MLflow writes "View run … at: URL" to stdout when a run ends; stdout is our JSON, so send it to stderr
    with contextlib.redirect_stdout(sys.stderr):
        run_id = open_run(uri, experiment_id(uri, experiment), f"evaluate-{report.subset}")
        try:
            log_evaluation(uri, run_id, report)
        except BaseException:
            close_run(uri, run_id, failed=True)
            raise
        close_run(uri, run_id)


def _report(path: str) -> dict | None:
    """An `evaluate --out` folder's or a report.json's content; None for anything else (a TREC run)."""
    p = Path(path)
    if p.is_dir() or p.suffix == ".json":
        report = p / "report.json" if p.is_dir() else p
        if not report.is_file():
            raise SourceError(f"{path}: no report.json (pass an `evaluate --out` folder, a report.json or a TREC run)")
        doc = json.loads(report.read_text())
        if "suite" not in doc or "per_query" not in doc:
            raise SourceError(f"{report}: not a report `dualview evaluate --out` writes (expected suite, metrics, per_query)")
        return doc
    return None


def _run_values(path: str, qrels, measure: str) -> dict[str, dict[str, float]]:
    """metric -> query -> value of a TREC run, by pytrec_eval against `qrels`."""
    if qrels is None:
        raise SourceError(f"{path}: a TREC run needs --qrels to be compared")
    from dualview_core.method.metrics import per_query_measures
    from dualview_core.data.trec import read_run

    values = per_query_measures(qrels, read_run(path, qrels, known_label="--qrels"), [measure])
    return {m: {q: v * SCALE for q, v in per_q.items()} for m, per_q in values.items()}


def _paired(a: dict, b: dict, key: str, resamples: int, seed: int) -> dict | None:
    from dualview_core.evaluation.stats import paired_macro_test, paired_test

    if key in a.get("groups", {}) and key in b.get("groups", {}):
        ga, gb = a["groups"][key], b["groups"][key]
        if len(ga) == len(gb) and any(set(x) & set(y) for x, y in zip(ga, gb)):
            return paired_macro_test(ga, gb, resamples, seed).as_dict()
        return None
    x, y = a["per_query"].get(key, {}), b["per_query"].get(key, {})
    return paired_test(x, y, resamples, seed).as_dict() if set(x) & set(y) else None


def cmd_compare(args: argparse.Namespace) -> int:
    from dualview_core.data.trec import read_qrels
    from tasks.evaluation.summary import cells_of, columns_of, table

    paths = [args.a, args.b, *args.more]
    reports = [_report(p) for p in paths]
    if all(r is not None for r in reports):
        labels = dict(zip(paths, reports))
        columns = columns_of(labels)
        print(table({p: cells_of(r) for p, r in labels.items()}, columns, label="run"), file=sys.stderr)
        a, b = reports[0], reports[1]
        keys = [k for k in dict.fromkeys([*columns, *a["metrics"]]) if k in b["metrics"]]
        comparisons = {k: c for k in keys if (c := _paired(a, b, k, args.resamples, args.seed)) is not None}
        if not comparisons:
            raise SourceError(f"{args.a} and {args.b} share no metric over common queries")
        print_json({"a": args.a, "b": args.b, "suites": sorted({r["suite"] for r in reports}), "columns": columns,
                    "metrics": {p: r["metrics"] for p, r in labels.items()}, "comparisons": comparisons})
        return EXIT_OK
    if args.more:
        raise SourceError("compare takes more than two systems only as `evaluate --out` reports")
    from dualview_core.evaluation.stats import paired_test

    _check_measures([args.measure])
    qrels = read_qrels(args.qrels) if args.qrels else None
    a = reports[0]["per_query"] if reports[0] else _run_values(args.a, qrels, args.measure)
    b = reports[1]["per_query"] if reports[1] else _run_values(args.b, qrels, args.measure)
    shared = [m for m in a if m in b and set(a[m]) & set(b[m])]
    if not shared:
        raise SourceError(f"{args.a} and {args.b} share no metric over common queries")
    comparisons = {m: paired_test(a[m], b[m], args.resamples, args.seed).as_dict() for m in shared}
    print_json({"a": args.a, "b": args.b, "comparisons": comparisons})
    return EXIT_OK


def _catalog_names() -> list[str]:
    from dualview_core.data.catalog import catalog

    c = catalog()
    return [*c.suites, *c.tasks]


def _top_k(text: str) -> int | None:
    return None if text == "all" else int(text)


def _stats_flags(parser: argparse.ArgumentParser, resamples: int) -> None:
    parser.add_argument("--resamples", type=int, default=resamples, help="bootstrap / randomization resamples")
    parser.add_argument("--seed", type=int, default=DEFAULTS.bootstrap_seed)


def register(sub: argparse._SubParsersAction) -> None:
    score = sub.add_parser("score", help="score any system's og/changed TREC runs: p-MRR and trec_eval measures")
    for name in ("qrels-og", "qrels-changed", "run-og", "run-changed"):
        score.add_argument(f"--{name}", required=True, metavar="FILE")
    score.add_argument("--measures", nargs="+", default=[MAP_1000, NDCG_5], help="pytrec_eval measures, e.g. map_cut_1000 ndcg_cut_5")
    score.add_argument("--changed-rule", choices=["followir", "infosearch"], default="followir",
                       help="which documents count as changed: label differs (FollowIR) or relevant-then-not (InfoSearch)")
    _stats_flags(score, DEFAULTS.bootstrap_resamples)
    score.set_defaults(func=cmd_score)

    ev = sub.add_parser("evaluate", help="evaluate a model on a suite or an eval set; print its numbers with intervals")
    ev.add_argument("--model", required=True, help="Hugging Face / sentence-transformers folder, 'minilm', or a "
                    "registered model, models:/NAME/VERSION or models:/NAME@ALIAS (server: MLFLOW_TRACKING_URI)")
    ev.add_argument("--suite", help=f"a catalog suite or task: {', '.join(_catalog_names())}; needs --data")
    ev.add_argument("--data", help="the folder `dualview data get SUITE --to DIR` wrote (one subfolder per task), local or s3://")
    ev.add_argument("--eval-set", help="one task's FollowIR / InfoSearch / MAIR folder, local or s3:// (instead of --suite)")
    ev.add_argument("--out", help="folder for run_<view>.trec files and report.json")
    ev.add_argument("--benchmark", choices=["followir", "infosearch", "mair", "instructir"], help="default: detected")
    ev.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size)
    ev.add_argument("--max-length", type=int, default=DEFAULTS.max_length)
    ev.add_argument("--device", default=DEFAULTS.device, help="auto (CUDA when present, else cpu), cpu, cuda or cuda:N")
    ev.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default=DEFAULTS.precision,
                    help="the encoder's precision: auto (bf16 on CUDA, fp32 on the CPU); scores are fp32 either way")
    ev.add_argument("--pooling", choices=POOLING_MODES, help="override the folder's pooling (a plain Hugging Face "
                    "folder declares none: mean unless given)")
    ev.add_argument("--top-k", type=_top_k, default=DEFAULTS.top_k, help="kept per query when ranking the whole corpus ('all': every document)")
    ev.add_argument("--search", choices=["exact", "faiss"], default=DEFAULTS.search)
    ev.add_argument("--query-template", default=DEFAULTS.query_template)
    ev.add_argument("--strict", action="store_true", help="refuse an eval set any of whose rows were quarantined "
                    "(default: score without them and count them in the output)")
    ev.add_argument("--mlflow-experiment", help="also log to MLflow (tracking URI from MLFLOW_TRACKING_URI)")
    _stats_flags(ev, DEFAULTS.bootstrap_resamples)
    add_endpoint_flag(ev)
    ev.set_defaults(func=cmd_evaluate)

    cmp = sub.add_parser("compare", help="paired comparison of two systems with p-values; a table of the suite's columns")
    cmp.add_argument("a", help="an `evaluate --out` folder, a report.json, or a TREC run (with --qrels)")
    cmp.add_argument("b")
    cmp.add_argument("more", nargs="*", help="more `evaluate --out` reports: rows of the table (pairs are a vs b)")
    cmp.add_argument("--qrels", help="qrels for comparing TREC runs")
    cmp.add_argument("--measure", default=NDCG_10, help="pytrec_eval measure for TREC runs")
    _stats_flags(cmp, 10_000)
    cmp.set_defaults(func=cmd_compare)
