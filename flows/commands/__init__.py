"""CLI subcommands, one module per stage. Each module exposes `register(subparsers)`.

Helpers shared by every command live here: JSON output, exit codes, S3 options from flags.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

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


PROJECT_ROOT = Path(__file__).resolve().parents[2]


def project_env() -> dict[str, str]:
    """Environment defaults that keep every tool offline and its state inside the project."""
    cache = PROJECT_ROOT / ".cache"
    return {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(cache / "huggingface"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "PREFECT_HOME": str(cache / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "DO_NOT_TRACK": "1",
        "MLFLOW_ENABLE_TELEMETRY": "false",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }


def apply_project_env() -> None:
    """Set the defaults above where the caller has not set its own (the CLI's edge)."""
    for name, value in project_env().items():
        os.environ.setdefault(name, value)
