"""Where training's result goes: the output folder's rules and the published checkpoint.

Owns what may be written at `--out` — nothing is overwritten; a checkpoint this very run already
published is recognised by its run fingerprint; an upload a crash cut short (no dualview.json yet)
(remote outputs only: a local publish is one rename) is taken over only by the run whose saved
state sits next to it — and how the checkpoint gets
there: the optimizer's fp32 master weights gathered on rank 0 (every ZeRO stage, bf16 runs too),
loaded into the run's SentenceTransformer built afresh on CPU and written by its own `save` (every
module it was trained with: pooling, Dense, prompts, Normalize) into a temporary sibling and
renamed, or staged and uploaded with dualview.json last. It does not know the training loop
(`tasks.training.trainer`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from dualview_core.config import TrainingConfig
from dualview_core.training.resume import state_location
from dualview_core.storage.filesystems import filesystem, is_remote

METADATA = "dualview.json"  # how a checkpoint was trained (config, data digest); written last


class OutputExists(FileExistsError):
    """The checkpoint destination is taken; training does not overwrite."""


class OutputUnwritable(OSError):
    """The checkpoint cannot be written where asked: no permission, a file in the way, or no room."""


# What a run writes next to `out`, in multiples of the model's fp32 weights: the checkpoint itself,
# and while it trains with save_every, a state of weights plus AdamW's two moments
CHECKPOINT_COPIES, STATE_COPIES = 1, 3


def needed_bytes(params: int | None, save_every: int) -> int | None:
    """Bytes the output's disk must have: the checkpoint, and the resumable state when one is saved.

        >>> needed_bytes(100_000_000, 0), needed_bytes(100_000_000, 500)
        (400000000, 1600000000)
    """
    if params is None:
        return None
    return 4 * params * (CHECKPOINT_COPIES + (STATE_COPIES if save_every else 0))


def check_writable(out: str, needed: int | None, storage_options: dict | None = None) -> None:
    """Before the first step: `out` can be created and written, and (local disks) holds `needed` bytes.
    A remote store is asked to take and delete a small marker object."""
    if is_remote(out):
        fs, inner = filesystem(out, storage_options)
        marker = f"{inner.rstrip('/')}.write-check-{uuid.uuid4().hex}"
        try:
            fs.pipe_file(marker, b"")
            fs.rm(marker)
        except OSError as exc:
            raise OutputUnwritable(f"{out}: cannot write there ({type(exc).__name__}: {exc})") from None
        return
    parent = Path(out).resolve().parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        raise OutputUnwritable(f"{out}: {existing} is a file, not a folder; choose another output folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputUnwritable(f"{out}: no permission to write in {existing}; choose another output folder")
    free = shutil.disk_usage(existing).free
    if needed is not None and free < needed:
        raise OutputUnwritable(f"{out}: the disk is full for this run: {free / 2**30:.1f} GiB free on {existing}, "
                               f"the checkpoint and its resumable state need {needed / 2**30:.1f} GiB")


@contextlib.contextmanager
def naming_a_full_disk(where: str) -> Iterator[None]:
    """An ENOSPC while writing becomes an error that says the disk is full, and where."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OutputUnwritable(f"{where}: the disk is full (no space left on device); free room or "
                                   "choose an output on another disk, then run again to resume") from None
        raise


def check_destination(out: str, storage_options: dict | None = None, fingerprint: str | None = None) -> dict | None:
    """None when `out` may be written. When it holds a checkpoint this very run published
    (`fingerprint` matches: a retry after the publish), its metadata. Anything else fails before
    any training."""
    fs, inner = filesystem(out, storage_options)
    if not fs.exists(inner) or (fs.isdir(inner) and not fs.ls(inner)):
        return None
    meta = f"{inner.rstrip('/')}/{METADATA}"
    if not fs.isfile(meta):
        if is_remote(out) and fingerprint and _own_state(out, storage_options, fingerprint):
            return None  # this run's upload, cut short by a crash: the resumed run uploads it again
        raise OutputExists(f"{out} already exists and holds no {METADATA} (not a finished checkpoint); "
                           "remove it or choose a new output folder")
    metadata = json.loads(fs.cat_file(meta))
    if fingerprint and metadata.get("run_fingerprint") == fingerprint:
        return metadata
    raise OutputExists(f"{out} already exists; choose a new output folder")


def _own_state(out: str, storage_options: dict | None, fingerprint: str) -> bool:
    from tasks.training.state import read_progress

    progress = read_progress(state_location(out), storage_options)
    return progress is not None and progress.fingerprint == fingerprint


def _wrapper_masters(optimizer) -> dict[int, object]:
    """id(param) -> fp32 master kept by DeepSpeed's plain low-precision optimizers (ZeRO 0 with bf16
    or fp16), which link none to their parameters: `FP16_UnfusedOptimizer` (a torch optimizer, ours)
    holds one fp32 copy per parameter in `fp32_groups`, `FP16_Optimizer` (fused Adam) one flat copy
    per group in `fp32_groups_flat`."""
    from torch._utils import _unflatten_dense_tensors

    groups = getattr(optimizer, "fp16_groups", None)
    if not groups:
        return {}
    if getattr(optimizer, "fp32_groups_flat", None):
        masters = [_unflatten_dense_tensors(flat.detach(), group) for group, flat in zip(groups, optimizer.fp32_groups_flat)]
    else:
        masters = getattr(optimizer, "fp32_groups", [])
    return {id(p): m for group, copies in zip(groups, masters) for p, m in zip(group, copies)}


def master_weights(engine) -> dict:
    """name -> the optimizer's full fp32 copy of every trainable parameter of `engine.module`, on
    CPU. Under ZeRO 1-3 (and DeepSpeed's bf16 optimizer) `safe_get_full_fp32_param` gathers it —
    a collective, which every rank joins in the same order; under ZeRO 0 with bf16 it is the
    wrapper's own fp32 copy; an fp32 run without a wrapper trains its parameters in fp32 itself. A
    low-precision parameter with no master anywhere is an error, never a silent bf16 publish."""
    import torch
    from deepspeed.utils import safe_get_full_fp32_param

    flat = _wrapper_masters(engine.optimizer)
    out = {}
    for name, param in engine.module.named_parameters():
        full = safe_get_full_fp32_param(param)
        if full is None:
            full = flat.get(id(param), param if param.dtype == torch.float32 and not hasattr(param, "ds_id") else None)
        if full is None:
            raise RuntimeError(f"no fp32 master weight for {name} ({param.dtype}); refusing to publish rounded weights")
        shape = getattr(param, "ds_shape", param.shape)
        out[name] = full.detach().float().cpu().reshape(shape).clone()
    return out


def full_state_dict(engine) -> dict | None:
    """The SentenceTransformer's weights in fp32 on CPU, keyed as its own state dict, on rank 0 (None
    elsewhere): the optimizer's master weights, so a bf16 run publishes what it trained, not its
    bf16 working copy."""
    import torch.distributed as dist

    weights = master_weights(engine)  # every rank: a collective under ZeRO 1-3
    if dist.get_rank() != 0:
        return None
    return {k.removeprefix("model."): v for k, v in weights.items()}


def _receive(model, weights: dict) -> None:
    """Load trained `weights` into `model` (built afresh): every parameter must find its place; what
    is left is buffers, which do not train."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    buffers = {name for name, _ in model.named_buffers()}
    if unexpected or set(missing) - buffers:
        raise RuntimeError(f"trained weights do not fit the model: unexpected {unexpected[:3]}, "
                           f"missing {sorted(set(missing) - buffers)[:3]}")


def publish(local: Path, out: str, storage_options: dict | None = None) -> None:
    """Copy a finished local folder to `out` (any fsspec URL), the metadata file last, so a reader
    that finds dualview.json finds a complete checkpoint."""
    fs, inner = filesystem(out, storage_options)
    files = sorted(p for p in local.rglob("*") if p.is_file())
    for path in sorted(files, key=lambda p: p.name == METADATA):
        fs.put_file(str(path), f"{inner.rstrip('/')}/{path.relative_to(local).as_posix()}")


def save_checkpoint(engine, cfg: TrainingConfig, out: str, storage_options: dict | None, metadata: dict) -> None:
    """Write the checkpoint on rank 0: into a temporary sibling then renamed (local), or staged in a
    temporary folder and uploaded (remote)."""
    import torch
    import torch.distributed as dist

    from dualview_core.model import training_model

    weights = full_state_dict(engine)
    if dist.get_rank() == 0:
        model = training_model(cfg, "cpu").float()
        _receive(model, weights)
        for module in model.modules():  # the weights are fp32 even after bf16 training: say so in config.json
            if hasattr(module, "config") and hasattr(module.config, "dtype"):
                module.config.dtype = torch.float32
        remote = is_remote(out)
        stage = Path(tempfile.mkdtemp()) if remote else Path(f"{out.rstrip('/')}.{uuid.uuid4().hex}.tmp")
        try:
            with naming_a_full_disk(str(stage.parent)):
                model.save(str(stage), create_model_card=False)
                (stage / METADATA).write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
                if remote:
                    publish(stage, out, storage_options)
                else:
                    os.replace(stage, out)  # an empty `out` folder is replaced
        finally:
            shutil.rmtree(stage, ignore_errors=True)  # a staged copy, or what a failed write left half-done
    dist.barrier()
