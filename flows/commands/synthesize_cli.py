"""`dualview synthesize`: polarity-reversal synthesis from the command line, no Prefect needed."""

from __future__ import annotations

import argparse
import sys
from typing import get_args

from dualview_core.config import OpenAIEngineConfig, SynthesisConfig
from dualview_core.config.synthesis import Filtering, Prompt, prompt_sampling
from dualview_core.config.profiles import resolve
from dualview_core.synthesis.job_spec import read_spec
from flows.commands import EXIT_OK, EXIT_UNUSABLE, add_endpoint_flag, one_line, print_json, storage_options


def config_from_args(args: argparse.Namespace) -> SynthesisConfig:
    """The profile's synthesis (--profile, default cpu) with the flags given on top. The CLI is its own
    Ray driver: a profile's Ray Job address is dropped (join a cluster with --ray-address)."""
    base = resolve(args.profile).synthesis.model_copy(update={"ray_job": None})
    given = {"engine": args.engine, "per_negative": args.per_negative, "geometry_filter": args.geometry_filter,
             "limit": args.limit, "ray_address": args.ray_address, "filtering": args.filtering, "prompt": args.prompt,
             "shard_rows": args.shard_rows}
    update: dict = {k: v for k, v in given.items() if v is not None}
    if args.prompt and args.prompt != base.prompt:  # another prompt: its own decoding, unless the profile's is kept
        update["sampling"] = prompt_sampling(args.prompt).model_copy(update={"temperature": base.sampling.temperature})
    engine = update.get("engine", base.engine)
    if args.model and engine == "vllm":
        update["vllm"] = base.vllm.model_copy(update={"model": args.model})
    if engine == "openai":
        urls = args.base_url or []  # one: base_url; several: base_urls, rows spread over them
        fields = {k: v for k, v in {"model": args.model, "concurrency": args.concurrency, "actors": args.actors}.items() if v}
        fields |= {"base_url": urls[0], "base_urls": ()} if len(urls) == 1 else {"base_urls": tuple(urls)} if urls else {}
        update["openai"] = OpenAIEngineConfig(**{**base.openai.model_dump(), **fields})
    return SynthesisConfig(**{**base.model_dump(), **update})


def cmd_synthesize(args: argparse.Namespace) -> int:
    from flows.commands import stderr_filter
    from tasks.synthesis.driver import run_synthesis

    stderr_filter.install()  # Ray Data's known-harmless error line (see the module)
    from flows.commands.train_cli import stdout_to_stderr

    if args.spec:  # a submitted Ray job (dualview_core/synthesis/job_spec.py): the whole run in one argument
        seeds, seed_options, out, out_options, cfg = read_spec(args.spec)
    elif args.seeds and args.out:
        from pydantic import ValidationError

        try:
            cfg = config_from_args(args)
        except ValidationError as exc:  # a request that cannot run: one line, before anything starts
            print(f"dualview: error: {one_line(exc)}", file=sys.stderr)
            return EXIT_UNUSABLE
        seeds, seed_options, out, out_options = args.seeds, storage_options(args), args.out, None
    else:
        print("dualview synthesize: give --seeds and --out (or --spec)", file=sys.stderr)
        return EXIT_UNUSABLE
    with stdout_to_stderr():  # libraries loaded on the way (tokenizers, DeepSpeed's probe) print to stdout
        summary = run_synthesis(seeds, out, cfg, seed_options, progress=lambda m: print(m, file=sys.stderr),
                                out_storage_options=out_options)
    if args.spec:  # the submitter reads the summary from the run's manifest, not from this log
        print(f"synthesis: done; the summary is in {out.rstrip('/')}/manifest.json", file=sys.stderr)
    else:
        print_json(summary)
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synthesize", help="write complementary instructions for seeds with an instruction negative")
    p.add_argument("--seeds", help="seed rows (Parquet/JSONL/folder, local or s3://)")
    p.add_argument("--out", help="output folder (local or s3://); re-runs only do what is missing")
    p.add_argument("--spec", help="the whole run as JSON (seeds, out, options, config) instead of the flags below: "
                   "what a synthesis submitted as a Ray Job runs (dualview_core/synthesis/job_spec.py)")
    p.add_argument("--profile", default="cpu", help="profiles/<name>.yaml to start from (cpu, cluster); the flags "
                   "below override it")
    p.add_argument("--engine", choices=["vllm", "openai"], help="default: the profile's (vllm)")
    p.add_argument("--base-url", action="append",
                   help="openai engine: endpoint root ending in /v1; repeat it to spread rows over several endpoints")
    p.add_argument("--model", help="vllm: model id or folder ('smollm2' = packaged); openai: served model name")
    p.add_argument("--concurrency", type=int, help="openai engine: requests in flight per actor")
    p.add_argument("--actors", type=int, help="openai engine: client actors, each with --concurrency in flight")
    p.add_argument("--limit", type=int, help="only the first N eligible seeds")
    p.add_argument("--shard-rows", type=int, help="rows per published output shard")
    p.add_argument("--per-negative", action="store_true", default=None, help="one reversed view per instruction negative")
    p.add_argument("--geometry-filter", action="store_true", default=None,
                   help="keep only rows the frozen encoder agrees with")
    p.add_argument("--prompt", choices=get_args(Prompt), default=None,
                   help="the polarity-reversal prompt: the paper's (reasoning, then the answer) or the compact one for small models")
    p.add_argument("--filtering", choices=get_args(Filtering), default=None,
                   help="which checks drop rows: none (the paper), guards (content rules), verify (guards, then a "
                        "second call per accepted row to confirm the reversal)")
    p.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    add_endpoint_flag(p)
    p.set_defaults(func=cmd_synthesize)
