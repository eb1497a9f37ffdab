"""`dualview pipeline`: the pipeline flow (synthesize → train → evaluate → register) from a shell.

It runs the `pipeline` flow in this process, as `dualview demo` does, on a profile with the flags on
top: what the Prefect UI's run form sets, for a user at a terminal or in a batch script. The config
is resolved and checked before anything starts, so a request that cannot run (an alias MLflow would
refuse, a profile field out of range) is one line and exit 2. Prints the run's JSON summary on
stdout and the p-MRR / Score table on stderr.
"""

from __future__ import annotations

import argparse
import sys

from flows.commands import EXIT_OK, EXIT_UNUSABLE, one_line, print_json


def data_fields(args: argparse.Namespace) -> dict:
    """What `--seeds`, `--data`, `--suite` and `--name` set of a pipeline config, JSON-shaped (this
    command's and `dualview experiment`'s)."""
    fields: dict = {}
    if args.seeds:
        fields["seeds"] = {"path": args.seeds}
    if args.data:
        fields["eval_set"] = {"path": args.data}
    if args.suite:
        fields["evaluation"] = {"suite": args.suite}
    if args.name:
        fields["name"] = args.name
    return fields


def overrides_from_args(args: argparse.Namespace) -> dict:
    """The pipeline fields the flags set (the profile supplies the rest), JSON-shaped."""
    fields = data_fields(args)
    if args.mixture:
        fields["training"] = {"mixture": {"name": args.mixture}}
    for flag in ("tracking_uri", "registered_model", "register_alias"):
        if getattr(args, flag) is not None:
            fields[flag] = getattr(args, flag)
    return fields


def cmd_pipeline(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from dualview_core.config.profiles import PipelineOverrides, resolve
    from flows.commands import stderr_filter

    fields = overrides_from_args(args)
    try:
        resolve(args.profile, fields)  # the flow resolves it again; here it is refused before any cost
        overrides = PipelineOverrides.model_validate(fields)
    except ValidationError as exc:
        print(f"dualview: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_UNUSABLE
    from flows.pipeline import pipeline

    stderr_filter.install()  # Ray Data's known-harmless error line (see the module)
    result = pipeline(profile=args.profile, config=overrides)
    print(result["table"], file=sys.stderr)
    print_json({k: result[k] for k in ("mlflow_run_id", "mlflow_experiment_id", "checkpoint", "registered_model",
                                       "headline")})
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    from dualview_core.config import MixtureConfig, PipelineConfig

    def described(name: str) -> str:
        return (PipelineConfig.model_fields[name].description or "").replace("%", "%%")

    p = sub.add_parser("pipeline", help="synthesize, train, evaluate and register one model, as one MLflow run")
    p.add_argument("--profile", choices=["cpu", "cluster"], default="cpu", help="what the rest comes from (default cpu)")
    p.add_argument("--seeds", help="seed rows (local or s3://); default: the profile's")
    p.add_argument("--data", help="the suite's data folder (what `dualview data get SUITE` wrote); default: the profile's")
    p.add_argument("--suite", help="the suite to evaluate on (paper: the six columns); default: the profile's")
    p.add_argument("--mixture", choices=MixtureConfig.model_fields["name"].annotation.__args__,
                   help="the mixture to train on; default: the profile's")
    p.add_argument("--name", help="the MLflow experiment; default: the profile's")
    p.add_argument("--tracking-uri", help=described("tracking_uri"))
    p.add_argument("--registered-model", help=described("registered_model"))
    p.add_argument("--register-alias", help=described("register_alias"))
    p.set_defaults(func=cmd_pipeline)
