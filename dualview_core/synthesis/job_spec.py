"""A synthesis run submitted as a Ray Job: what the job is given, and how its log and end are read.

The job runs `dualview synthesize --spec JSON` on the cluster. The spec is the whole run (seeds, out,
their storage options, the synthesis config) and is visible to anyone who can read the cluster's job
list, so it must not carry credentials: a job takes those from the cluster's own environment (AWS_*,
an IAM role), as its workers do. Pure: no Ray, no Prefect.

    >>> spec = job_spec("s3://b/seeds/", {}, "s3://b/out/", None, SynthesisConfig(engine="openai"))
    >>> entrypoint(spec).split()[:3]
    ['dualview', 'synthesize', '--spec']
    >>> read_spec(shlex.split(entrypoint(spec))[3])[0]
    's3://b/seeds/'
"""

from __future__ import annotations

import json
import os
import re
import shlex

from dualview_core.config import SynthesisConfig, is_secret_name
from dualview_core.keys import digest
from dualview_core.storage.layout import output_options
from dualview_core.storage.filesystems import is_remote

SUCCEEDED, TERMINAL = "SUCCEEDED", frozenset({"SUCCEEDED", "FAILED", "STOPPED"})  # Ray's JobStatus values
ANSI_STYLE = re.compile(r"\x1b\[[0-9;]*m")


def credential_fields(options: dict | None, where: str = "") -> list[str]:
    """The dotted names of every option that looks like a credential (key, secret, token, ...).

        >>> credential_fields({"key": "A", "client_kwargs": {"endpoint_url": "http://s3"}})
        ['key']
    """
    found = []
    for name, value in (options or {}).items():
        dotted = f"{where}{name}"
        if isinstance(value, dict):
            found += credential_fields(value, f"{dotted}.")
        elif is_secret_name(name):
            found.append(dotted)
    return found


def _located(path: str) -> str:
    """A local path made absolute (the job does not start in this process's folder); URLs as given."""
    return path if is_remote(path) else os.path.abspath(path)


def job_spec(seeds: str, seed_options: dict | None, out: str, out_options: dict | None, cfg: SynthesisConfig) -> dict:
    """What the job runs: JSON-safe, credential-free, with the driver joining the cluster it runs in.
    Raises ValueError (one line) when the storage options carry credentials."""
    for label, options in (("seeds", seed_options), ("out", out_options)):
        if secrets := credential_fields(options):
            raise ValueError(f"ray_job: the {label} storage options carry credentials ({', '.join(secrets)}); a submitted "
                             "job is readable by everyone on the cluster: give the cluster's nodes those credentials instead")
    return {"seeds": _located(seeds), "seed_options": seed_options or {}, "out": _located(out),
            "out_options": output_options(out_options, seed_options),
            "config": cfg.model_copy(update={"ray_job": None, "ray_address": None}).model_dump(mode="json")}


def entrypoint(spec: dict) -> str:
    """The job's shell command; the project's CLI must be on the cluster's PATH (the ray-vllm image)."""
    return "dualview synthesize --spec " + shlex.quote(json.dumps(spec, separators=(",", ":"), sort_keys=True))


def read_spec(text: str) -> tuple[str, dict, str, dict, SynthesisConfig]:
    """(seeds, seed options, out, out options, config) from a spec's JSON text."""
    spec = json.loads(text)
    return spec["seeds"], spec["seed_options"], spec["out"], spec["out_options"], SynthesisConfig(**spec["config"])


def submission_id(out: str, now: float) -> str:
    """A job id that names the output it writes (Ray refuses an id twice, so the time is part of it).

        >>> submission_id("s3://b/out/", 1700000000.5)
        'dualview-synthesis-3b01b1c1ed9e-1700000000500'
    """
    return f"dualview-synthesis-{digest(out.encode(), size=6)}-{int(now * 1000)}"


def new_lines(log: str, seen: int, finished: bool = False) -> tuple[list[str], int]:
    """The complete lines of `log` after character `seen`, and the new `seen`: a line still being
    written waits for its newline, unless the log is `finished`. Terminal colours (Ray paints its own
    lines) are taken out.

        >>> new_lines("a\\nb\\npart", 0)
        (['a', 'b'], 4)
        >>> new_lines("a\\nb\\npartial\\n", 4)
        (['partial'], 12)
    """
    end = len(log) if finished else log.rfind("\n") + 1
    if end <= seen:
        return [], seen
    return [ANSI_STYLE.sub("", line) for line in log[seen:end].splitlines()], end


def failure(job_id: str, status: str, message: str | None, log: str, tail: int) -> str:
    """The error a failed or stopped job becomes: its status, Ray's message and its last log lines."""
    lines = [line for line in log.splitlines() if line.strip()][-tail:]
    head = f"Ray job {job_id} {status.lower()}" + (f": {message.strip()}" if message and message.strip() else "")
    return head + ("\nlast log lines:\n" + "\n".join(lines) if lines else "\n(the job wrote no log)")
