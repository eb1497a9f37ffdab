"""CLI subcommands, one `<stage>_cli` module per stage (the flows of the same stage sit one level up).
Each module exposes `register(subparsers)`.

Helpers shared by every command live here: JSON output, exit codes, S3 options from flags.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from dualview_core.storage.layout import PROJECT_ROOT

EXIT_OK, EXIT_UNUSABLE = 0, 2


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def one_line(exc: Exception) -> str:
    """An error as the one line a refused command prints: a pydantic ValidationError as one clause
    per field (`field: message`), anything else as its first line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        clauses = [(".".join(map(str, e["loc"])), e["msg"].removeprefix("Value error, ")) for e in errors()]
        return "; ".join(f"{where}: {msg}" if where else msg for where, msg in clauses)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def storage_options(args: argparse.Namespace) -> dict:
    """fsspec options for s3:// paths. Credentials come from the environment (AWS_*), never flags."""
    if getattr(args, "endpoint_url", None):
        return {"client_kwargs": {"endpoint_url": args.endpoint_url}}
    return {}


def add_endpoint_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint-url", help="S3-compatible endpoint for s3:// paths (credentials from env)")




# Variables naming a folder a tool writes into: created (with parents) before any tool starts, since
# some create only the last level (Prefect's PREFECT_HOME) and fail on a fresh clone without .cache/.
FOLDER_VARIABLES = ("HF_HOME", "TORCH_EXTENSIONS_DIR", "PREFECT_HOME", "MPLCONFIGDIR", "VLLM_CACHE_ROOT", "RUSTUP_HOME",
                    "VLLM_CONFIG_ROOT", "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                    "MTEB_CACHE")


def project_env() -> dict[str, str]:
    """Environment defaults that keep every tool offline and its state inside the project (never in HOME)."""
    cache = PROJECT_ROOT / ".cache"
    return {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(cache / "huggingface"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "PREFECT_HOME": str(cache / "prefect"),
        "MPLCONFIGDIR": str(cache / "matplotlib"),
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "VLLM_CONFIG_ROOT": str(cache / "vllm-config"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "MTEB_CACHE": str(cache / "mteb"),  # mteb (the reference-parity tests) makes ~/.cache/mteb on import
        # rustup's proxies (where a Rust toolchain is on PATH) write ~/.rustup when a build probes for
        # cargo: DeepSpeed's sdist does, when pip reads its metadata (tests/integration/test_image_pins.py)
        "RUSTUP_HOME": str(cache / "rustup"),
        # what else follows the XDG layout (~/.cache, ~/.config, ~/.local/share) stays here too
        "XDG_CACHE_HOME": str(cache / "xdg" / "cache"),
        "XDG_CONFIG_HOME": str(cache / "xdg" / "config"),
        "XDG_DATA_HOME": str(cache / "xdg" / "data"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",  # no newsletter pop-up over the run form
        # the demo's temporary server migrates a fresh database before it answers: on a small machine
        # that can take longer than Prefect's default 20 s, and the demo would fail to start
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "DO_NOT_TRACK": "1",
        "MLFLOW_ENABLE_TELEMETRY": "false",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }


def apply_project_env() -> None:
    """Set the defaults above where the caller has not set its own (the CLI's edge), and create the
    folders they name, ours or the caller's. Call it before Prefect is imported: Prefect reads
    PREFECT_HOME, and tries to create it, at import time."""
    for name, value in project_env().items():
        os.environ.setdefault(name, value)
    # Prefect derives these from PREFECT_HOME only when it is given as a Path, and falls back to
    # ~/.prefect when it comes from the environment: name them from PREFECT_HOME ourselves.
    prefect_home = Path(os.environ["PREFECT_HOME"])
    os.environ.setdefault("PREFECT_MEMO_STORE_PATH", str(prefect_home / "memo_store.toml"))
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(prefect_home / "storage"))
    if not Path("/dev/nvidiactl").exists():  # no NVIDIA driver: say so, instead of DeepSpeed warning at import
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for name in FOLDER_VARIABLES:
        Path(os.environ[name]).mkdir(parents=True, exist_ok=True)
