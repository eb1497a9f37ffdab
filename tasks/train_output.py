"""Where training's result goes: the output folder's rules and the published checkpoint.

Owns what may be written at `--out` — nothing is overwritten; a checkpoint this very run already
published is recognised by its run fingerprint; an upload a crash cut short (no dualview.json yet)
(remote outputs only: a local publish is one rename) is taken over only by the run whose saved
state sits next to it — and how the checkpoint gets
there: full fp32 weights gathered on rank 0 (ZeRO-3 included), written as a sentence-transformers
folder (`dualview_core.checkpoint`) into a temporary sibling and renamed, or staged and uploaded
with dualview.json last. It does not know the training loop (`tasks.training`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from dualview_core.checkpoint import METADATA, write_sentence_transformers_folder
from dualview_core.config import TrainingConfig
from dualview_core.resume import state_location
from dualview_core.sources import filesystem, is_remote


class OutputExists(FileExistsError):
    """The checkpoint destination is taken; training does not overwrite."""


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
    from tasks.train_state import read_progress

    progress = read_progress(state_location(out), storage_options)
    return progress is not None and progress.fingerprint == fingerprint


def full_state_dict(engine, encoder, stage: int) -> dict | None:
    """fp32 weights of the encoder on CPU, on rank 0 (None elsewhere). ZeRO-3 gathers the shards,
    which every rank must join."""
    import torch.distributed as dist

    if stage == 3:
        state = engine._zero3_consolidated_16bit_state_dict()  # keeps the engine's dtype; keys "model.…"
        items = {k.removeprefix("model."): v for k, v in (state or {}).items()}
    else:
        items = encoder.model.state_dict()
    return {k: v.detach().float().cpu() for k, v in items.items()} if dist.get_rank() == 0 else None


def publish(local: Path, out: str, storage_options: dict | None = None) -> None:
    """Copy a finished local folder to `out` (any fsspec URL), the metadata file last, so a reader
    that finds dualview.json finds a complete checkpoint."""
    fs, inner = filesystem(out, storage_options)
    files = sorted(p for p in local.rglob("*") if p.is_file())
    for path in sorted(files, key=lambda p: p.name == METADATA):
        fs.put_file(str(path), f"{inner.rstrip('/')}/{path.relative_to(local).as_posix()}")


def save_checkpoint(engine, encoder, cfg: TrainingConfig, out: str, storage_options: dict | None, metadata: dict) -> None:
    """Write the checkpoint on rank 0: into a temporary sibling then renamed (local), or staged in a
    temporary folder and uploaded (remote)."""
    import torch
    import torch.distributed as dist

    state = full_state_dict(engine, encoder, cfg.zero_stage)
    if dist.get_rank() == 0:
        encoder.model.config.dtype = torch.float32  # the weights are written in fp32 even after bf16 training
        remote = is_remote(out)
        stage = Path(tempfile.mkdtemp()) if remote else Path(f"{out.rstrip('/')}.{uuid.uuid4().hex}.tmp")
        write_sentence_transformers_folder(stage, encoder.model, encoder.tokenizer, pooling=encoder.pooling,
                                           max_length=cfg.max_length, metadata=metadata, state_dict=state)
        if remote:
            publish(stage, out, storage_options)
            shutil.rmtree(stage)
        else:
            os.replace(stage, out)  # an empty `out` folder is replaced
    dist.barrier()
