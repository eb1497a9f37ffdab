"""Resumable training state, task side: DeepSpeed's engine state and RNG in and out of `<out>.state`.

Owns the files: every rank saves its part through `engine.save_checkpoint` (weights, optimizer
shards, LR schedule) plus its own RNG state (dropout); rank 0 then writes `progress.json`, the commit
point, and removes older steps. A remote location (s3://) is staged per rank in a temporary folder
and uploaded; resuming downloads the named step. Which state may be loaded, and where the data
resumes, are the core's rules (`dualview_core.training.resume`).

For several nodes the location must be shared storage (s3:// or a shared file system): each rank
reads and writes its own shard of the optimizer state there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from dualview_core.training.resume import PROGRESS, Progress
from dualview_core.storage.filesystems import filesystem, is_remote

RNG = "rng-rank{rank}.pt"


def read_progress(location: str, storage_options: dict | None = None) -> Progress | None:
    """The last committed save at `location`, or None when there is none."""
    fs, inner = filesystem(location, storage_options)
    path = f"{inner.rstrip('/')}/{PROGRESS}"
    return Progress.from_json(fs.cat_file(path).decode()) if fs.exists(path) else None


def _rng_state() -> dict:
    import torch

    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _restore_rng(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save_state(engine, location: str, progress: Progress, storage_options: dict | None = None) -> None:
    """Every rank calls this after optimizer step `progress.step`; returns once the save is committed."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    local = Path(tempfile.mkdtemp(prefix="dualview-state-")) if is_remote(location) else Path(location)
    (local / progress.tag).mkdir(parents=True, exist_ok=True)
    engine.save_checkpoint(str(local), tag=progress.tag, save_latest=False)
    torch.save(_rng_state(), local / progress.tag / RNG.format(rank=rank))
    fs, inner = filesystem(location, storage_options)
    if is_remote(location):
        for path in sorted(p for p in (local / progress.tag).rglob("*") if p.is_file()):
            fs.put_file(str(path), f"{inner.rstrip('/')}/{path.relative_to(local).as_posix()}")
        shutil.rmtree(local)
    dist.barrier()  # every rank's part is written before the commit names it
    if rank == 0:
        _commit(fs, inner.rstrip("/"), progress, remote=is_remote(location))
    dist.barrier()


def _commit(fs, inner: str, progress: Progress, *, remote: bool) -> None:
    target = f"{inner}/{PROGRESS}"
    if remote:
        fs.pipe_file(target, progress.to_json().encode())  # one PUT: an object store has no torn writes
    else:
        tmp = f"{target}.{os.getpid()}.tmp"
        Path(tmp).write_text(progress.to_json())
        os.replace(tmp, target)  # atomic: a reader sees the old commit or the new one
    for entry in fs.ls(inner, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith("step-") and name != progress.tag:
            fs.rm(entry, recursive=True)


def load_state(engine, location: str, progress: Progress, storage_options: dict | None = None) -> None:
    """Every rank loads the committed step into its engine and RNG."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    fs, inner = filesystem(location, storage_options)
    local = Path(tempfile.mkdtemp(prefix="dualview-state-")) if is_remote(location) else Path(location)
    try:
        if is_remote(location):
            fs.get(f"{inner.rstrip('/')}/{progress.tag}/", str(local / progress.tag), recursive=True)
        path, _ = engine.load_checkpoint(str(local), tag=progress.tag)
        if path is None:
            raise RuntimeError(f"{location}/{progress.tag}: the engine state named by {PROGRESS} is incomplete")
        _restore_rng(torch.load(local / progress.tag / RNG.format(rank=rank), weights_only=False))
    finally:
        if is_remote(location):
            shutil.rmtree(local, ignore_errors=True)
    dist.barrier()


def clear_state(location: str, storage_options: dict | None = None) -> None:
    """Rank 0, after the checkpoint is published: the state has served its purpose."""
    fs, inner = filesystem(location, storage_options)
    if fs.exists(inner):
        fs.rm(inner, recursive=True)
