"""Training from inputs on disk: read seeds and dual views, build the mixture, train in this process
or as N ranks under the `deepspeed` launcher. Also the script each launched rank runs
(`python -m tasks.training.worker`, started by the launcher — not by hand).

The mixture is built once on disk (`dualview_core.training.mixture_store`) under the mixture cache
(default `.cache/mixtures` in the project), in a folder named by its digest; `inputs/<key>.json`
maps the inputs (the mixture config, the validation rules, each input file's fsspec `ukey`:
path, size and modification time) to that digest, so a run on the same unchanged files opens the
built mixture instead of reading the seeds again. A folder is renamed into place only once complete.

Several ranks: the parent builds (or finds) the mixture, then runs

    deepspeed --num_gpus N --master_port P --no_local_rank --module tasks.training.worker --config … --store … --digest …

Every rank opens the same store memory-mapped — one copy on disk, pages shared by the ranks of a
node — reads only the rows of its own batches, and refuses to train if the digest differs. On a CPU machine `--num_gpus N` still starts N processes: the
launcher only trims its slot list to N and never checks that GPUs exist (DeepSpeed 0.19), while
`--include localhost:0,1` fails because the CPU "accelerator" reports one device per NUMA node.
Ranks then talk over gloo, each with cpu_count / N threads. The launcher's ranks cannot call a
callback in this process: rank 0 appends each signal to a file as a JSON line and the parent hands
them to the callback as they come (`follow`), so MLflow shows a multi-GPU run's curves live.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import shutil
import uuid
from collections.abc import Iterator

from dualview_core.config import MixtureConfig, TrainingConfig, ValidationConfig
from dualview_core.contracts import DUAL_VIEW_ROW
from dualview_core.storage.integrity import check_published
from dualview_core.storage.tables import read_table
from dualview_core.keys import canonical_json, digest
from dualview_core.training.mixture_store import FORMAT, META, StoredMixture, build_store, open_store
from dualview_core.method.mixtures import MixtureError
from dualview_core.method.negatives import block_width
from dualview_core.training.resume import run_fingerprint
from dualview_core.data.sources import SourceError
from dualview_core.storage.filesystems import filesystem
from dualview_core.method.training_rows import total_steps
from tasks.training.preflight import check_memory, model_shape
from tasks.training.output import check_destination, check_writable, needed_bytes
from tasks.training.trainer import (PROJECT_CACHE, Callback, TrainResult, device_kind, extensions_dir, free_port,
                                    published_result, train)

MIXTURE_CACHE = PROJECT_CACHE / "mixtures"


def _dual_view_files(path: str, storage_options: dict | None = None) -> list[str]:
    """One Parquet file, or the Parquet shards of a folder in name order."""
    fs, inner = filesystem(path, storage_options)
    if not fs.isdir(inner):
        return [path]
    return [fs.unstrip_protocol(p) for p in sorted(p for p in fs.ls(inner, detail=False) if p.endswith(".parquet"))]


def dual_view_batches(path: str, storage_options: dict | None = None) -> Iterator:
    """DUAL_VIEW_ROW tables, one file or shard at a time."""
    for file in _dual_view_files(path, storage_options):
        check_published(file, storage_options)
        yield read_table(file, DUAL_VIEW_ROW, storage_options)


def inputs_key(cfg: MixtureConfig, seeds: str, dual_views: str | None, storage_options: dict | None = None) -> str:
    """What a built mixture depends on, hashed: the config, the validation rules, each input's ukey."""
    def ukey(path: str) -> str:
        fs, inner = filesystem(path, storage_options)
        try:
            return fs.ukey(inner)
        except OSError as exc:  # a missing file says so here, as reading it would
            raise SourceError(f"{path}: cannot read ({exc})") from exc

    views = [(p, ukey(p)) for p in _dual_view_files(dual_views, storage_options)] if dual_views else []
    parts = [FORMAT, cfg.model_dump(mode="json"), ValidationConfig().model_dump(mode="json"),
             [seeds, ukey(seeds)], views]
    return digest(canonical_json(parts))


def _move_into_place(building: Path, folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # a leftover without meta.json: never complete
    try:
        os.replace(building, folder)
    except OSError:
        if not (folder / META).is_file():
            raise
        shutil.rmtree(building)  # another process put the same mixture in place first


def load_mixture(cfg: MixtureConfig, seeds: str, dual_views: str | None, storage_options: dict | None = None,
                 cache: str | os.PathLike | None = None) -> StoredMixture:
    """The mixture on disk: the one built before from the same inputs, or built now (see above)."""
    from dualview_core.data.loading import stream_seeds

    cache = Path(cache or MIXTURE_CACHE)
    pointer = cache / "inputs" / f"{inputs_key(cfg, seeds, dual_views, storage_options)}.json"
    if pointer.is_file():
        folder = cache / json.loads(pointer.read_text())["digest"]
        if (folder / META).is_file():
            return open_store(folder)
    building = cache / f"building-{uuid.uuid4().hex}"
    try:
        batches, _ = stream_seeds(seeds, storage_options)
        views = dual_view_batches(dual_views, storage_options) if dual_views else iter(())
        chosen = build_store(batches, views, cfg, building)
        folder = cache / chosen.digest
        if (folder / META).is_file():  # the same mixture from other inputs (or another process): keep one
            shutil.rmtree(building)
        else:
            _move_into_place(building, folder)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.with_suffix(".tmp").write_text(json.dumps({"digest": chosen.digest, "seeds": seeds, "dual_views": dual_views}))
    os.replace(pointer.with_suffix(".tmp"), pointer)
    return open_store(folder)


def run(cfg: TrainingConfig, seeds: str, dual_views: str | None, out: str, *, processes: int = 1,
        storage_options: dict | None = None, callback: Callback | None = None,
        mixture_cache: str | os.PathLike | None = None) -> TrainResult:
    """Build (or find) the mixture and train it, in this process (processes=1) or under the
    launcher. A device the machine lacks (`DeviceUnavailable`) and a step that cannot fit in memory
    (`MemoryShortfall`) are refused before any data is read."""
    device_kind(cfg)
    check_memory(cfg, world=processes)
    shape = model_shape(cfg.model)
    check_writable(out, needed_bytes(shape.params if shape else None, cfg.save_every), storage_options)
    mixture = load_mixture(cfg.mixture, seeds, dual_views, storage_options, mixture_cache)
    if processes == 1:
        return train(cfg, mixture, out, storage_options=storage_options, callback=callback)
    published = check_destination(out, storage_options, run_fingerprint(cfg, mixture.digest, processes))
    if published is not None:
        return published_result(out, published)
    block_width(mixture.rows, cfg.negatives, strict=cfg.strict_negatives)  # fail before starting ranks
    try:
        total_steps(len(mixture.rows), batch_size=cfg.batch_size, world_size=processes,
                    grad_accumulation=cfg.grad_accumulation, epochs=cfg.epochs, max_steps=cfg.max_steps)
    except ValueError as exc:  # what every rank would raise after the launcher started them
        raise MixtureError(f"{exc}: fewer ranks, a smaller batch or a larger mixture") from None
    return launch(cfg, mixture, out, processes, storage_options, callback)


def _worker_env(processes: int, device: str) -> dict:
    env = dict(os.environ)
    if device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"  # the launcher and its ranks would otherwise take a CUDA they find
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # the launcher sets them per rank
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
    return env


def launch(cfg: TrainingConfig, mixture: StoredMixture, out: str, processes: int,
           storage_options: dict | None = None, callback: Callback | None = None) -> TrainResult:
    """Run `processes` ranks under the `deepspeed` launcher; return rank 0's result. Rank 0 writes
    each signal as a JSON line; they reach `callback` while the ranks train, not after."""
    with tempfile.TemporaryDirectory() as tmp:
        config, options, result = Path(tmp, "config.json"), Path(tmp, "storage.json"), Path(tmp, "result.json")
        signals, log = Path(tmp, "signals.jsonl"), Path(tmp, "launcher.log")
        config.write_text(cfg.model_dump_json())
        options.write_text(json.dumps(storage_options or {}))
        signals.touch()
        cmd = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", str(processes), "--master_port",
               str(free_port()), "--no_local_rank", "--module", "tasks.training.worker", "--config", str(config),
               "--store", mixture.folder, "--out", out, "--storage-options", str(options), "--result", str(result),
               "--signals", str(signals), "--digest", mixture.digest]
        with open(log, "wb") as sink:
            env = _worker_env(processes, device_kind(cfg))
            proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)
            try:
                follow(signals, proc, callback or (lambda step, metrics: None))
            finally:
                if proc.poll() is None:  # the caller was interrupted: do not leave ranks behind
                    proc.terminate()
                    proc.wait()
        if proc.returncode != 0 or not result.is_file():
            tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
            raise RuntimeError(f"deepspeed launcher exited with {proc.returncode}:\n{tail}")
        return TrainResult(**json.loads(result.read_text()))


def follow(signals: Path, proc: subprocess.Popen, callback: Callback, poll_s: float = 0.2) -> None:
    """Hand each complete JSON line of `signals` to `callback` as it is written, until `proc` ends."""
    with open(signals, encoding="utf-8") as stream:
        pending = ""
        while True:
            ended = proc.poll() is not None  # read after checking, so the last lines are not missed
            pending += stream.read()
            *lines, pending = pending.split("\n")
            for line in filter(None, lines):
                record = json.loads(line)
                callback(record.pop("step"), record)
            if ended:
                return
            time.sleep(poll_s)


def _signal_writer(path: str | None) -> Callback | None:
    """Rank 0's callback: one JSON line per signal, flushed, for the parent to follow."""
    if not path:
        return None

    def write(step: int, metrics: dict) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")

    return write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one training rank (started by the deepspeed launcher)")
    for flag in ("--config", "--store", "--out", "--storage-options", "--result", "--digest"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--signals", help="a file rank 0 appends each signal to, as a JSON line")
    args = parser.parse_args(argv)
    cfg = TrainingConfig.model_validate_json(Path(args.config).read_text())
    options = json.loads(Path(args.storage_options).read_text()) or None
    mixture = open_store(args.store)
    if mixture.digest != args.digest:
        raise RuntimeError(f"rank {os.environ['RANK']} opened mixture {mixture.digest}, the parent built {args.digest}")
    result = train(cfg, mixture, args.out, storage_options=options, callback=_signal_writer(args.signals))
    if os.environ["RANK"] == "0":
        Path(args.result).write_text(json.dumps(dataclasses.asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
