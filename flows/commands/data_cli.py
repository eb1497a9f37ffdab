"""`dualview seeds …`, `dualview evalset …`, `dualview data …`, `dualview demo`, `dualview sample-path`: the data commands."""

from __future__ import annotations

import argparse
import time

from dualview_core import sample
from dualview_core.config import ValidationConfig
from flows.commands import EXIT_OK, add_endpoint_flag, print_json, storage_options


def cmd_seeds_check(args: argparse.Namespace) -> int:
    from dualview_core.data.loading import stream_seeds

    cfg = ValidationConfig(max_passage_chars=args.max_passage_chars)
    batches, validator = stream_seeds(args.path, storage_options(args), cfg, args.quarantine)
    for _ in batches:
        pass
    summary = {**validator.report.as_dict(), "source": args.path}
    if args.quarantine:
        summary["quarantine_file"] = args.quarantine
    print_json(summary)
    return EXIT_OK


def cmd_seeds_select(args: argparse.Namespace) -> int:
    from dualview_core.contracts import SEED_ROW
    from dualview_core.storage.tables import TableWriter
    from dualview_core.data.loading import stream_seeds
    from dualview_core.data.seeds import select_synthesis_seeds

    batches, validator = stream_seeds(args.path, storage_options(args), quarantine_path=args.quarantine)
    with TableWriter(args.out, SEED_ROW, storage_options(args)) as writer:
        for batch in batches:
            writer.write(select_synthesis_seeds(batch))
    print_json({**validator.report.as_dict(), "selected": writer.rows, "out": args.out})
    return EXIT_OK


def cmd_evalset_check(args: argparse.Namespace) -> int:
    from dualview_core.data.evalsets import load_eval_set

    load = load_eval_set(args.path, storage_options=storage_options(args))
    es = load.eval_set
    print_json({
        "name": es.name,
        "documents": es.corpus.num_rows,
        "queries": len(set(es.queries.column("query_id").to_pylist())),
        "views": es.views(),
        "judgements": es.qrels.num_rows,
        "queries_with_candidates": 0 if es.top_ranked is None else es.top_ranked.num_rows,
        "quarantined": {name: len(rows) for name, rows in load.rejected.items()},
        "meta": es.meta,
    })
    return EXIT_OK


def cmd_data_get(args: argparse.Namespace) -> int:
    from tasks.data.fetch import get

    fetched = get(args.name, args.to, revision=args.revision, endpoint=args.hub_endpoint,
                  storage_options=storage_options(args), docs_revision=args.docs_revision)
    print_json({f.name: {"folder": f.folder, "repo": f.repo, "revision": f.revision, "files": len(f.files),
                         "bytes": f.bytes, "sources": [{k: s[k] for k in ("repo", "revision")} for s in f.sources]}
                for f in fetched})
    return EXIT_OK


def cmd_data_list(args: argparse.Namespace) -> int:
    from dualview_core.data.catalog import catalog

    c = catalog()
    print_json({
        "tasks": {n: {"title": t.title, "benchmark": t.benchmark, **({"repo": t.source.repo, "revision": t.source.revision}
                                                                      if t.source else {"bundled": True}),
                      **({"optional": True} if t.optional else {})} for n, t in c.tasks.items()},
        "suites": {n: s.title for n, s in c.suites.items()},
        "seeds": {n: {"title": s.title, "repo": s.source.repo, "revision": s.source.revision} for n, s in c.seeds.items()},
    })
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded defaults: the whole pipeline on the bundled sample, on a temporary
    Prefect API, a local Ray, the CPU vLLM with SmolLM2, MiniLM, DeepSpeed on CPU, MLflow in SQLite."""
    from dualview_core.config.profiles import resolve
    from flows.commands import stderr_filter
    from flows.pipeline import pipeline

    stderr_filter.install()  # Ray Data's known-harmless error line (see the module)
    start = time.perf_counter()
    config = resolve("cpu")
    result = pipeline(profile="cpu")
    minutes = (time.perf_counter() - start) / 60
    # the flow has printed the p-MRR / Score table (it is in the flow run's logs too)
    print(f"\ndone in {minutes:.1f} min; MLflow run {result['mlflow_run_id']} in experiment '{config.name}'")
    print(f"  checkpoint: {result['checkpoint']}")
    print("  MLflow UI : .venv/bin/mlflow ui --backend-store-uri " + config.tracking_uri + " --port 5000")
    print(f"              then http://127.0.0.1:5000/#/experiments/{result['mlflow_experiment_id']}/runs?workflowType=machine_learning"
          "  (Columns: pick sample/p-MRR, sample/score, delta/sample/p-MRR)")
    print("  Prefect UI: PREFECT_HOME=.cache/prefect .venv/bin/prefect server start   (then http://127.0.0.1:4200)")
    return EXIT_OK


def cmd_sample_path(args: argparse.Namespace) -> int:
    print(sample.seeds_path() if args.what == "seeds" else sample.followir_path())
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    seeds = sub.add_parser("seeds", help="inspect and select seed data").add_subparsers(dest="action", required=True)
    check = seeds.add_parser("check", help="validate seed rows; print a JSON summary")
    check.add_argument("path", help="Parquet/JSONL file, folder, or save_to_disk folder; local or s3://")
    check.add_argument("--quarantine", help="write rejected rows with reasons to this Parquet file")
    check.add_argument("--max-passage-chars", type=int, default=ValidationConfig().max_passage_chars)
    check.set_defaults(func=cmd_seeds_check)
    select = seeds.add_parser("select", help="write the valid rows that have an instruction negative")
    select.add_argument("path")
    select.add_argument("--out", required=True, help="Parquet file for the selected SeedRows")
    select.add_argument("--quarantine")
    select.set_defaults(func=cmd_seeds_select)

    evalset = sub.add_parser("evalset", help="inspect eval sets").add_subparsers(dest="action", required=True)
    ev_check = evalset.add_parser("check", help="load a FollowIR/InfoSearch/MAIR folder; print a summary")
    ev_check.add_argument("path")
    ev_check.set_defaults(func=cmd_evalset_check)
    data = sub.add_parser("data", help="the benchmark catalog and its published data").add_subparsers(dest="action", required=True)
    data_get = data.add_parser("get", help="download a task, a suite (paper: all of them) or seed set from the hub")
    data_get.add_argument("name", help="a catalog name: a task (robust04), a suite (followir, paper) or seeds (promptriever)")
    data_get.add_argument("--to", required=True, help="destination folder, local or s3://; one sub-folder per task")
    data_get.add_argument("--revision", help="a commit of the main repository instead of the catalog's pin")
    data_get.add_argument("--docs-revision", help="a commit of MAIR's documents repository instead of the catalog's pin")
    data_get.add_argument("--hub-endpoint", help="the hub to download from (default: $HF_ENDPOINT, else huggingface.co)")
    data_get.set_defaults(func=cmd_data_get)
    data.add_parser("list", help="the catalog: tasks, suites and seed sets with their sources").set_defaults(func=cmd_data_list)
    for parser in (check, select, ev_check, data_get):
        add_endpoint_flag(parser)

    demo = sub.add_parser("demo", help="run the main job on the embedded defaults and bundled sample")
    demo.set_defaults(func=cmd_demo)
    sample = sub.add_parser("sample-path", help="print where the bundled sample is installed")
    sample.add_argument("what", choices=["seeds", "followir"])
    sample.set_defaults(func=cmd_sample_path)
