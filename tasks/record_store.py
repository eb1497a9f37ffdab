"""The synthesis output folder (local or s3://): append-only record shards, derived tables, a manifest.

    OUT/records/part-*.parquet   SynthesisRecords, written one shard at a time, each published by
                                 rename, so a killed run leaves whole shards only. They are the cache.
                                 Version-1 shards (no seed columns) are read as version 2.
    OUT/verifications/part-*.parquet   the verification pass's answers (SynthesisRecords), same rules
    OUT/dual_views.parquet       DualViewRows for the current seeds (derived; rewritten every run)
    OUT/rejections.parquet       SynthesisRecords rejected for the current seeds (derived)
    OUT/quarantine.parquet       seed rows that failed validation
    OUT/report.md                counts and a few examples per outcome, for a person (derived)
    OUT/manifest.json            the last completed run: seed map, fingerprint, counts, versions

A run holds OUT/.lock (local folders) so two runs on one folder cannot interleave their writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import posixpath
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dualview_core.contracts import SYNTHESIS_RECORD, conform, upgrade_synthesis_record
from dualview_core.io import write_table
from dualview_core.sources import filesystem
from dualview_core.synthesis import final_records


RECORDS, VERIFICATIONS = "records", "verifications"


class RecordStore:
    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.options = storage_options or {}
        self.fs, self.root = filesystem(self.out, self.options)
        for folder in (RECORDS, VERIFICATIONS):
            self.fs.makedirs(posixpath.join(self.root, folder), exist_ok=True)

    def path(self, name: str) -> str:
        return f"{self.out}/{name}"

    def _shards(self, folder: str) -> list[str]:
        pattern = posixpath.join(self.root, folder, "part-*.parquet")
        return sorted(self.fs.glob(pattern))

    def _all_records(self, folder: str) -> Iterator[dict]:
        for shard in self._shards(folder):
            with self.fs.open(shard, "rb") as f:
                table = conform(upgrade_synthesis_record(pq.read_table(f)), SYNTHESIS_RECORD, what=shard)
            yield from table.to_pylist()

    def records(self, max_error_runs: int = 3, folder: str = RECORDS) -> dict[str, dict]:
        """cache_key -> its final record. Transient engine errors are skipped, so a re-run retries
        them, until a key has failed in `max_error_runs` runs."""
        return final_records(self._all_records(folder), max_error_runs)

    def write_shard(self, rows: list[dict], folder: str = RECORDS) -> str:
        """Publish one shard atomically (written under a temporary name, then renamed)."""
        name = f"part-{uuid.uuid4().hex}.parquet"
        write_table(self.path(f"{folder}/{name}"), pa.Table.from_pylist(rows, schema=SYNTHESIS_RECORD),
                    SYNTHESIS_RECORD, self.options)
        return name

    def write_text(self, name: str, text: str) -> str:
        """A derived text file (the report), replaced whole; returns its path."""
        tmp = posixpath.join(self.root, f".{name}.{uuid.uuid4().hex}.tmp")
        self.fs.pipe_file(tmp, text.encode("utf-8"))
        self.fs.mv(tmp, posixpath.join(self.root, name))
        return self.path(name)

    def manifest(self) -> dict:
        path = posixpath.join(self.root, "manifest.json")
        return json.loads(self.fs.cat_file(path)) if self.fs.exists(path) else {}

    def write_manifest(self, manifest: dict) -> None:
        tmp = posixpath.join(self.root, f".manifest.{uuid.uuid4().hex}.tmp")
        self.fs.pipe_file(tmp, json.dumps(manifest, indent=2, sort_keys=True).encode())
        self.fs.mv(tmp, posixpath.join(self.root, "manifest.json"))

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive use of a local output folder; remote folders rely on the orchestrator's limit."""
        if self.fs.protocol not in ("file", ("file", "local")) and "file" not in self.fs.protocol:
            yield
            return
        with open(Path(self.root) / ".lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(f"{self.out} is being written by another synthesis run") from None
            yield
