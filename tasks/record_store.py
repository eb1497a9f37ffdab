"""The synthesis output folder (local or s3://): append-only record shards, derived tables, a manifest.

    OUT/records/part-*.parquet   SynthesisRecords, written one shard at a time, each published by
                                 rename, so a killed run leaves whole shards only. They are the cache.
    OUT/dual_views.parquet       DualViewRows for the current seeds (derived; rewritten every run)
    OUT/rejections.parquet       SynthesisRecords rejected for the current seeds (derived)
    OUT/quarantine.parquet       seed rows that failed validation
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

from dualview_core.contracts import SYNTHESIS_RECORD, conform
from dualview_core.io import write_table
from dualview_core.sources import filesystem
from dualview_core.synthesis import is_final


class RecordStore:
    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.options = storage_options or {}
        self.fs, self.root = filesystem(self.out, self.options)
        self.fs.makedirs(posixpath.join(self.root, "records"), exist_ok=True)

    def path(self, name: str) -> str:
        return f"{self.out}/{name}"

    def _shards(self) -> list[str]:
        pattern = posixpath.join(self.root, "records", "part-*.parquet")
        return sorted(self.fs.glob(pattern))

    def records(self) -> dict[str, dict]:
        """cache_key -> its final record. Engine errors are skipped, so a re-run retries them."""
        out: dict[str, dict] = {}
        for shard in self._shards():
            with self.fs.open(shard, "rb") as f:
                table = conform(pq.read_table(f), SYNTHESIS_RECORD, what=shard)
            for rec in table.to_pylist():
                if is_final(rec):
                    out.setdefault(rec["cache_key"], rec)
        return out

    def write_shard(self, rows: list[dict]) -> str:
        """Publish one shard atomically (written under a temporary name, then renamed)."""
        name = f"part-{uuid.uuid4().hex}.parquet"
        write_table(self.path(f"records/{name}"), pa.Table.from_pylist(rows, schema=SYNTHESIS_RECORD),
                    SYNTHESIS_RECORD, self.options)
        return name

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
