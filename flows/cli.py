"""The `dualview` command line: thin wiring over the core, printing JSON a script can read.

Exit codes: 0 when the command did its job (a seed file whose every row was quarantined still
counts: it was read); 2 with one line on stderr when the input cannot be used at all (missing
path, unreadable, unsupported format).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from dualview_core import samples
from dualview_core.config import ValidationConfig
from dualview_core.sources import SourceError

EXIT_OK, EXIT_UNUSABLE = 0, 2


def _storage_options(args: argparse.Namespace) -> dict:
    # Credentials come from the environment (AWS_* variables), never from flags.
    if getattr(args, "endpoint_url", None):
        return {"client_kwargs": {"endpoint_url": args.endpoint_url}}
    return {}


def _print(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def cmd_seeds_check(args: argparse.Namespace) -> int:
    from dualview_core.loading import stream_seeds

    cfg = ValidationConfig(max_passage_chars=args.max_passage_chars)
    batches, validator = stream_seeds(args.path, _storage_options(args), cfg, args.quarantine)
    for _ in batches:
        pass
    summary = validator.report.as_dict()
    summary["source"] = args.path
    if args.quarantine:
        summary["quarantine_file"] = args.quarantine
    _print(summary)
    return EXIT_OK


def cmd_seeds_select(args: argparse.Namespace) -> int:
    from dualview_core.contracts import SEED_ROW
    from dualview_core.io import TableWriter
    from dualview_core.loading import stream_seeds
    from dualview_core.seeds import select_synthesis_seeds

    batches, validator = stream_seeds(args.path, _storage_options(args), quarantine_path=args.quarantine)
    with TableWriter(args.out, SEED_ROW, _storage_options(args)) as writer:
        for batch in batches:
            writer.write(select_synthesis_seeds(batch))
    _print({**validator.report.as_dict(), "selected": writer.rows, "out": args.out})
    return EXIT_OK


def cmd_evalset_check(args: argparse.Namespace) -> int:
    from dualview_core.evalsets import load_eval_set

    load = load_eval_set(args.path, storage_options=_storage_options(args))
    es = load.eval_set
    _print({
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


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded defaults. Today: load, validate and select the bundled seeds,
    and load the bundled eval set. Synthesis, training and evaluation join as they land."""
    from dualview_core.evalsets import load_eval_set
    from dualview_core.loading import read_seeds
    from dualview_core.seeds import select_synthesis_seeds

    start = time.perf_counter()
    load = read_seeds(samples.seeds_path())
    selected = select_synthesis_seeds(load.seeds)
    ev = load_eval_set(samples.followir_path())
    _print({
        "seeds": load.report.as_dict(),
        "synthesis_seeds": selected.num_rows,
        "eval_set": {"name": ev.eval_set.name, "documents": ev.eval_set.corpus.num_rows,
                     "judgements": ev.eval_set.qrels.num_rows, "quarantined": ev.quarantined},
        "seconds": round(time.perf_counter() - start, 3),
        "next": "synthesis, training and evaluation are not wired into the demo yet",
    })
    return EXIT_OK


def cmd_sample_path(args: argparse.Namespace) -> int:
    print(samples.seeds_path() if args.what == "seeds" else samples.followir_path())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dualview", description="Dual-view instruction-following retrieval.")
    sub = parser.add_subparsers(dest="command", required=True)

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

    demo = sub.add_parser("demo", help="run the main job on the embedded defaults and bundled sample")
    demo.set_defaults(func=cmd_demo)
    sample = sub.add_parser("sample-path", help="print where the bundled sample is installed")
    sample.add_argument("what", choices=["seeds", "followir"])
    sample.set_defaults(func=cmd_sample_path)

    for p in (check, select, ev_check):
        p.add_argument("--endpoint-url", help="S3-compatible endpoint for s3:// paths (credentials from env)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SourceError as exc:
        print(f"dualview: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except BrokenPipeError:  # `dualview ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
