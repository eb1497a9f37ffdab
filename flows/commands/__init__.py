"""CLI subcommands, one module per stage. Each module exposes `register(subparsers)`.

Helpers shared by every command live here: JSON output, exit codes, S3 options from flags.
"""

from __future__ import annotations

import argparse
import json

EXIT_OK, EXIT_UNUSABLE = 0, 2


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def storage_options(args: argparse.Namespace) -> dict:
    """fsspec options for s3:// paths. Credentials come from the environment (AWS_*), never flags."""
    if getattr(args, "endpoint_url", None):
        return {"client_kwargs": {"endpoint_url": args.endpoint_url}}
    return {}


def add_endpoint_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint-url", help="S3-compatible endpoint for s3:// paths (credentials from env)")
