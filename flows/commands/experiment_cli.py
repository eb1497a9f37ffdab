"""`dualview experiment`: the paper's 2×2 (Ins-orig, Ins-DV, All-orig, All-DV) in one command.

It runs the `paper-experiment` flow in this process, as `dualview demo` runs the pipeline: synthesis
once, the four mixtures trained and evaluated on the profile's suite, one MLflow parent run. Prints
the run's JSON summary on stdout and the Table 1-shaped comparison on stderr.
"""

from __future__ import annotations

import argparse
import sys

from flows.commands import EXIT_OK, EXIT_UNUSABLE, print_json


def overrides_from_args(args: argparse.Namespace) -> dict:
    """The sweep's pipeline fields the flags set (the profile supplies the rest)."""
    from flows.commands.pipeline_cli import data_fields

    return {"pipeline": data_fields(args), **({"random_seeds": args.random_seeds} if args.random_seeds else {})}


def cmd_experiment(args: argparse.Namespace) -> int:
    from dualview_core.config.profiles import SweepOverrides
    from flows.commands import stderr_filter
    from flows.paper_experiment import paper_experiment

    if args.scale is not None and args.scale <= 0:
        print(f"dualview: error: --scale must be positive (got {args.scale})", file=sys.stderr)
        return EXIT_UNUSABLE
    stderr_filter.install()  # Ray Data's known-harmless error line (see the module)
    result = paper_experiment(profile=args.profile, scale=args.scale,
                              config=SweepOverrides.model_validate(overrides_from_args(args)))
    print(result["table"], file=sys.stderr)
    print_json({"mlflow_run_id": result["mlflow_run_id"], "scale": args.scale,
                "points": [{k: p[k] for k in ("name", "mixture", "size", "run_id", "metrics")} for p in result["points"]]})
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiment", help="the paper's experiment: the four mixtures trained and evaluated, one table")
    p.add_argument("--profile", choices=["cpu", "cluster"], default="cpu", help="what the rest comes from (default cpu)")
    p.add_argument("--scale", type=float, help="the paper's sizes times this (1.0: 480k / 440k instruct rows); "
                   "default: the one budget every mixture reaches on the data")
    p.add_argument("--seeds", help="seed rows (local or s3://); default: the profile's")
    p.add_argument("--data", help="the suite's data folder (what `dualview data get SUITE` wrote); default: the profile's")
    p.add_argument("--suite", help="the suite to evaluate on (paper: the six columns); default: the profile's")
    p.add_argument("--name", help="the MLflow experiment (default: dualview-sweep)")
    p.add_argument("--random-seeds", type=int, nargs="+", help="train each mixture once per seed (default: 0)")
    p.set_defaults(func=cmd_experiment)
