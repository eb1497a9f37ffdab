"""`dualview train`: build a mixture, train a bi-encoder under DeepSpeed, write a checkpoint.

Flags map one to one onto `TrainingConfig` / `MixtureConfig` fields (their help is the field's
description); a flag left out keeps the config default, and the config validates the result.
Prints a JSON summary; exit 2 with one line on stderr when the request cannot be run (bad config,
a mixture the data cannot make, strict negatives the data lacks, an output that exists, a saved state
of another run, a step that cannot fit in memory — `tasks.training.preflight`). Run again with the same `--out`
after a crash and it resumes from `<out>.state`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator

from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.config.profiles import merge, resolve
from flows.commands import EXIT_OK, EXIT_UNUSABLE, add_endpoint_flag, one_line, print_json, storage_options

# flag dest -> config field, for the fields whose flag name differs from the field name
MIXTURE_FLAGS = {"mixture": "name", "size": "size", "ratio": "ratio", "total": "total", "corruption": "corruption",
                 "heldout_fraction": "heldout_fraction", "mixture_seed": "seed"}
MIXTURE_TYPES = {"size": int, "ratio": float, "total": int, "corruption": float, "heldout_fraction": float}
def chunk(value: str) -> int | str:
    """--grad-cache-chunk: a number of texts, or auto."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of texts or auto, got {value!r}") from None


TRAINING_TYPES = {"model": str, "pooling": str, "max_length": int, "query_template": str, "negatives": int,
                  "temperature": float, "batch_size": int, "grad_cache_chunk": chunk, "grad_accumulation": int,
                  "learning_rate": float, "warmup_ratio": float, "weight_decay": float, "max_grad_norm": float,
                  "zero_stage": int, "seed": int, "eval_every": int, "save_every": int}
TRAINING_CHOICES = ("device", "precision")  # flags whose values are the field's Literal
TRAINING_FLAGS = ("model", "trust_remote_code", "device", "precision", "pooling", "max_length", "query_template",
                  "negatives", "strict_negatives", "in_batch_negatives", "temperature", "batch_size", "grad_cache_chunk", "grad_accumulation",
                  "learning_rate", "warmup_ratio", "weight_decay", "max_grad_norm", "max_steps", "epochs",
                  "zero_stage", "seed", "eval_every", "save_every")


def _help(model: type, name: str) -> str:
    return (model.model_fields[name].description or "").replace("%", "%%")


def config_from_args(args: argparse.Namespace) -> TrainingConfig:
    """TrainingConfig's defaults, or with --profile that profile's training; the flags given on top."""
    mixture = {field: getattr(args, dest) for dest, field in MIXTURE_FLAGS.items() if getattr(args, dest) is not None}
    training = {name: getattr(args, name) for name in TRAINING_FLAGS if getattr(args, name) is not None}
    if args.epochs is not None:  # a budget in epochs: no step limit, whatever the profile's
        training["max_steps"] = None
    base = resolve(args.profile).training.model_dump() if args.profile else {}
    return TrainingConfig.model_validate(merge(base, {**training, "mixture": mixture}))


def processes_from_args(args: argparse.Namespace) -> int:
    return args.processes or (resolve(args.profile).train_processes if args.profile else 1)


def summary(result, started: float) -> dict:
    from tasks.training.trainer import PEAK_ACCELERATOR_MB, PEAK_RSS_MB

    losses = [r["train/loss"] for r in result.history if "train/loss" in r]
    separations = [r["train/instruction_separation"] for r in result.history if "train/instruction_separation" in r]
    peaks = {key.removeprefix("train/"): round(max(values), 1) for key in (PEAK_RSS_MB, PEAK_ACCELERATOR_MB)
             if (values := [r[key] for r in result.history if key in r])}
    return {
        "checkpoint": result.checkpoint, "device": result.device, "precision": result.precision,
        "composition": result.composition, "data_digest": result.digest,
        "steps": result.steps, "resumed_from": result.resumed_from, "world_size": result.world_size, "train_seconds": round(result.seconds, 2),
        "total_seconds": round(time.perf_counter() - started, 2),
        "loss": {"first": losses[0], "last": losses[-1]} if losses else None,
        "separation": {"start": separations[0], "end": separations[-1]} if separations else None,
        **peaks,
    }


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout meanwhile to stderr, at the file-descriptor level: DeepSpeed
    logs and op builds print to stdout, and this command's stdout is its JSON summary."""
    for stream in (sys.stdout, sys.__stdout__):
        stream.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for stream in (sys.stdout, sys.__stdout__):
            stream.flush()
        os.dup2(saved, 1)
        os.close(saved)


def progress_printer():
    """A training callback printing progress lines on stderr (stdout holds only the JSON summary)."""
    from tasks.training.trainer import TrainProgress

    lines = TrainProgress()

    def show(step: int, metrics: dict) -> None:
        if line := lines(step, metrics):
            print(line, file=sys.stderr, flush=True)

    return show


def cmd_train(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from dualview_core.method.mixtures import MixtureError
    from dualview_core.method.negatives import NegativesError
    from dualview_core.training.resume import StateMismatch
    from tasks.training.preflight import MemoryShortfall
    from tasks.training.trainer import DeviceUnavailable
    from tasks.training.output import OutputExists, OutputUnwritable
    from tasks.training.worker import run

    started = time.perf_counter()
    try:
        cfg = config_from_args(args)
        with stdout_to_stderr():
            result = run(cfg, args.seeds, args.dual_views, args.out, processes=processes_from_args(args),
                         storage_options=storage_options(args), callback=progress_printer(),
                         mixture_cache=args.mixture_cache)
    except (ValidationError, MixtureError, NegativesError, OutputExists, OutputUnwritable, StateMismatch,
            MemoryShortfall, DeviceUnavailable) as exc:
        print(f"dualview: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_UNUSABLE
    print_json(summary(result, started))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a bi-encoder on a mixture; write a sentence-transformers checkpoint")
    names = MixtureConfig.model_fields["name"].annotation.__args__
    p.add_argument("--mixture", required=True, choices=names, help=_help(MixtureConfig, "name"))
    p.add_argument("--seeds", required=True, help="seed rows (any format `seeds check` reads), local or s3://")
    p.add_argument("--dual-views", help="DualViewRow Parquet file or folder. Pass it for every mixture: the "
                   "held-out split and the default N depend on it, and runs compare only when both match")
    p.add_argument("--out", required=True, help="checkpoint folder, local or s3:// (must not exist). A run "
                   "that crashed resumes when started again with the same --out")
    p.add_argument("--mixture-cache", help="folder of built mixtures (default: .cache/mixtures in the project). "
                   "A mixture is built there once, memory-mapped by every rank, and reused while the inputs "
                   "and the mixture flags are unchanged; delete a folder to free its disk")
    p.add_argument("--profile", help="start from profiles/<name>.yaml's training and processes (cpu, cluster) "
                   "instead of the config defaults; the flags below override it")
    p.add_argument("--processes", type=int,
                   help="ranks: 1 runs in this process, more run under the deepspeed launcher (default 1, or the profile's)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--max-steps", type=int, help=_help(TrainingConfig, "max_steps"))
    budget.add_argument("--epochs", type=float, help=_help(TrainingConfig, "epochs"))
    for flag, kind in MIXTURE_TYPES.items():
        p.add_argument(f"--{flag.replace('_', '-')}", type=kind, help=_help(MixtureConfig, flag))
    p.add_argument("--mixture-seed", type=int, help=_help(MixtureConfig, "seed"))
    for flag, kind in TRAINING_TYPES.items():
        p.add_argument(f"--{flag.replace('_', '-')}", type=kind, help=_help(TrainingConfig, flag))
    for flag in TRAINING_CHOICES:
        p.add_argument(f"--{flag}", choices=TrainingConfig.model_fields[flag].annotation.__args__,
                       help=_help(TrainingConfig, flag))
    p.add_argument("--trust-remote-code", action="store_true", default=None,
                   help=_help(TrainingConfig, "trust_remote_code"))
    p.add_argument("--strict-negatives", action="store_true", default=None,
                   help=_help(TrainingConfig, "strict_negatives"))
    p.add_argument("--in-batch-negatives", action=argparse.BooleanOptionalAction,
                   help=_help(TrainingConfig, "in_batch_negatives"))
    add_endpoint_flag(p)
    p.set_defaults(func=cmd_train)
