"""The synthesis output folder (local or s3://): append-only record shards, derived tables, a manifest.

    OUT/records/part-*.parquet   SynthesisRecords, written one shard at a time, each published by
                                 rename, so a killed run leaves whole shards only. They are the cache.
                                 Named part-<run>-<digest of run and keys>.parquet.
                                 Version-1 shards (no seed columns) are read as version 2.
    OUT/verifications/part-*.parquet   the verification pass's answers (SynthesisRecords), same rules
    OUT/dual_views.parquet       DualViewRows for the current seeds (derived; rewritten every run)
    OUT/rejections.parquet       SynthesisRecords rejected for the current seeds (derived)
    OUT/quarantine.parquet       seed rows that failed validation
    OUT/report.md                counts and a few examples per outcome, for a person (derived)
    OUT/seed_map.parquet         the last completed run's seeds (query_id, seed_key), for the next diff
    OUT/manifest.json            the last completed run: fingerprints, counts, versions (older
                                 manifests held the seed map inline; they are still read)
    OUT/.work/                   a run's intermediate files, written by its Ray workers and read by
                                 them: staged engine input (staged/, verify/) and quarantined rows
                                 per chunk (quarantine/). Removed when the run ends; a killed run's
                                 are removed by the next. On the output's storage, so every node of
                                 a cluster reads what another wrote.

What is cached is decided from an index (dualview_core.synthesis.cache_index) built from two columns of the
shards; whole records are read only for the rows a run derives its tables from, a shard at a time.

A run holds OUT/.lock (local folders) so two runs on one folder cannot interleave their writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import posixpath
import re
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from dualview_core.synthesis.cache_index import SEED_MAP, KeyIndex, build_index
from dualview_core.contracts import SYNTHESIS_RECORD, conform, upgrade_synthesis_record
from dualview_core.storage.tables import read_parquet, read_table, write_table
from dualview_core.keys import canonical_json, digest
from dualview_core.storage.filesystems import SourceError, filesystem
from dualview_core.storage.layout import MANIFEST


RECORDS, VERIFICATIONS, WORK, SEED_MAP_FILE = "records", "verifications", ".work", "seed_map.parquet"
INDEX_COLUMNS = ["cache_key", "rejection"]
SHARDS_IN_MEMORY = 16  # whole shards (a few MB each) kept while fetching records: a batch of one chunk's
# seeds finds its records in a few shards, filled by several publishing actors in no strict order


_RUN = re.compile(r"[0-9a-f]{16}")  # a run's id (`new_run`)
_SHARD = re.compile(r"part-(?P<run>[0-9a-f]{16})-[0-9a-f]{32}\.parquet")


def new_run() -> str:
    """A new run's id, as shard names carry it (`shard_run`)."""
    return uuid.uuid4().hex[:16]


def shard_run(name: str) -> str | None:
    """The run that wrote shard `name`, or None for a shard named without it (written before runs
    were named in shards, or by hand).

        >>> shard_run("part-0123456789abcdef-" + "0" * 32 + ".parquet"), shard_run("part-" + "0" * 32 + ".parquet")
        ('0123456789abcdef', None)
    """
    match = _SHARD.fullmatch(name)
    return match["run"] if match else None


class ShardIndex:
    """The cache index of one folder of shards, and the records it points at, fetched by key."""

    def __init__(self, store: RecordStore, shards: list[str], rows: list[int], index: KeyIndex):
        self.store, self.shards, self.index = store, shards, index
        self.offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self._cache: OrderedDict[int, pa.Table] = OrderedDict()

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, key: str) -> bool:
        return key in self.index

    def lookup(self, keys: Sequence[str]) -> np.ndarray:
        return self.index.lookup(keys)

    def fetch(self, keys: Sequence[str]) -> list[dict | None]:
        """The record answering each key (None where none does), reading only the shards that hold them."""
        positions = self.index.lookup(keys)
        out: list[dict | None] = [None] * len(keys)
        shard_of = np.searchsorted(self.offsets, positions, side="right") - 1
        for shard in np.unique(shard_of[positions >= 0]):
            wanted = np.flatnonzero((positions >= 0) & (shard_of == shard))
            rows = self._table(int(shard)).take(pa.array(positions[wanted] - self.offsets[shard])).to_pylist()
            for i, rec in zip(wanted, rows):
                out[i] = rec
        return out

    def _table(self, shard: int) -> pa.Table:
        if shard in self._cache:
            self._cache.move_to_end(shard)
            return self._cache[shard]
        table = self.store.read_shard(self.shards[shard])
        self._cache[shard] = table
        if len(self._cache) > SHARDS_IN_MEMORY:
            self._cache.popitem(last=False)
        return table


class OutputBusy(SourceError):
    """Another synthesis run holds the output folder."""


class RecordStore:
    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.options = storage_options or {}
        self.fs, self.root = filesystem(self.out, self.options)
        try:
            for folder in (RECORDS, VERIFICATIONS):
                self.fs.makedirs(posixpath.join(self.root, folder), exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            why = exc.strerror or "a file is in the way"
            raise SourceError(f"{self.out}: cannot be a synthesis output folder: {why} ({exc.filename or self.out})") from None

    def path(self, name: str) -> str:
        return f"{self.out}/{name}"

    def _listed(self, folder: str, prefix: str = "") -> list[str]:
        """The Parquet files in `folder` (a path in `fs`) whose names start with `prefix`, in name
        order; none when it does not exist. Ray workers write into these folders, so each listing is
        fetched afresh. Only that one listing is refreshed: clearing the filesystem's whole cache
        would race with other threads, as s3fs reads its cache without a lock (the progress
        reminders count plan parts from a thread)."""
        try:
            paths = self.fs.ls(folder, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = ((str(p), posixpath.basename(str(p))) for p in paths)
        return sorted(p for p, n in names if n.startswith(prefix) and n.endswith(".parquet"))

    def _shards(self, folder: str) -> list[str]:
        return self._listed(posixpath.join(self.root, folder), "part-")

    def read_shard(self, shard: str, columns: list[str] | None = None) -> pa.Table:
        with self.fs.open(shard, "rb") as f:
            table = read_parquet(f, f"record shard {self.fs.unstrip_protocol(shard)}", columns)
        if columns:
            return table
        return conform(upgrade_synthesis_record(table), SYNTHESIS_RECORD, what=shard)

    def shard_names(self, folder: str = RECORDS) -> list[str]:
        return [posixpath.basename(s) for s in self._shards(folder)]

    def index(self, max_error_runs: int = 3, folder: str = RECORDS) -> ShardIndex:
        """Which keys are answered and by which record, reading only the index columns of each shard."""
        shards = self._shards(folder)
        tables = [self.read_shard(s, INDEX_COLUMNS) for s in shards]
        runs = [shard_run(posixpath.basename(s)) for s in shards]
        index = ShardIndex(self, shards, [t.num_rows for t in tables], build_index(tables, max_error_runs, runs))
        del tables
        pa.default_memory_pool().release_unused()  # building's temporaries: Arrow's allocator keeps them otherwise
        return index

    def write_shard(self, rows: list[dict] | pa.Table, folder: str = RECORDS, run: str = "") -> str:
        """Publish one shard atomically (written under a temporary name, then renamed). Its name comes
        from the run and the keys it holds, so a task that is run again (Ray retries a task whose node
        died) replaces its own shard instead of adding a second copy of the rows; the run is also
        spelled out in it (`shard_run`), so the cache index counts the runs a call failed in."""
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=SYNTHESIS_RECORD)
        keys = sorted(table["cache_key"].to_pylist())
        content = digest(canonical_json([run, keys]))
        name = f"part-{run}-{content}.parquet" if _RUN.fullmatch(run) else f"part-{content}.parquet"
        write_table(self.path(f"{folder}/{name}"), table, SYNTHESIS_RECORD, self.options)
        return name

    def write_text(self, name: str, text: str) -> str:
        """A derived text file (the report), replaced whole; returns its path."""
        tmp = posixpath.join(self.root, f".{name}.{uuid.uuid4().hex}.tmp")
        self.fs.pipe_file(tmp, text.encode("utf-8"))
        self.fs.mv(tmp, posixpath.join(self.root, name))
        return self.path(name)

    def write_seed_map(self, table: pa.Table) -> str:
        write_table(self.path(SEED_MAP_FILE), table, SEED_MAP, self.options)
        return SEED_MAP_FILE

    def previous_seed_map(self, manifest: dict) -> pa.Table:
        """The last completed run's seeds: its seed_map.parquet, or the map an older manifest held inline."""
        if "seeds" in manifest:
            seeds = manifest["seeds"]
            return pa.table({"query_id": list(seeds), "seed_key": list(seeds.values())}, schema=SEED_MAP)
        if manifest.get("seed_map"):
            return read_table(self.path(manifest["seed_map"]), SEED_MAP, self.options)
        return SEED_MAP.empty_table()

    @property
    def local(self) -> bool:
        return self.fs.protocol in ("file", ("file", "local")) or "file" in self.fs.protocol

    def work(self, name: str) -> str:
        """A folder of this run's intermediate files, OUT/.work/<name>, as a path in `fs`."""
        return posixpath.join(self.root, WORK, name)

    def work_count(self, name: str) -> int:
        """How many Parquet files OUT/.work/<name> holds now (0 when it does not exist)."""
        return len(self.work_files(name))

    def work_files(self, name: str) -> list[str]:
        """The Parquet files in OUT/.work/<name> now, in name order (none when it does not exist)."""
        return self._listed(self.work(name))

    def clear_work(self) -> None:
        """Remove OUT/.work: this run's intermediate files, or a killed run's (the lock keeps runs apart)."""
        path = posixpath.join(self.root, WORK)
        self.fs.invalidate_cache()
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def clear_leftovers(self) -> None:
        """Remove every file a write left half-done (`.*.tmp`: renamed into place only when complete),
        which a killed run leaves behind; called by the next run once it holds the folder. Only local
        folders are held by a lock: on an object store another run's files in flight look the same."""
        if not self.local:
            return
        for folder in ("", RECORDS, VERIFICATIONS):
            for tmp in self.fs.glob(posixpath.join(self.root, folder, ".*.tmp")):
                self.fs.rm(tmp)

    def manifest(self) -> dict:
        path = posixpath.join(self.root, MANIFEST)
        if not self.fs.exists(path):
            return {}
        try:
            manifest = json.loads(self.fs.cat_file(path))
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict):
            raise SourceError(f"{self.path(MANIFEST)}: not a synthesis manifest (unreadable JSON); remove it and run "
                              "again: the records are kept and nothing is asked again")
        return manifest

    def write_manifest(self, manifest: dict) -> None:
        tmp = posixpath.join(self.root, f".manifest.{uuid.uuid4().hex}.tmp")
        self.fs.pipe_file(tmp, json.dumps(manifest, indent=2, sort_keys=True).encode())
        self.fs.mv(tmp, posixpath.join(self.root, MANIFEST))

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive use of a local output folder; remote folders rely on the orchestrator's limit."""
        if not self.local:
            yield
            return
        with open(Path(self.root) / ".lock", "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                raise OutputBusy(f"{self.out} is being written by another synthesis run ({holder}); wait for it "
                                 "or stop it") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"process {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
            handle.flush()
            yield
