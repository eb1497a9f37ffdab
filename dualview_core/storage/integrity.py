"""Whether a published file is still the one that was published: its row count and content digest.

A producer records `facts(fs, path)` of each file it publishes (in its manifest.json); anyone about
to rely on the file asks `damage(fs, path, recorded)` first. The check reads the size and, for
Parquet, the footer's row count — a file cut short, emptied or replaced fails it without reading the
data — and, with `full=True`, the whole content's digest. On an object store each read is a request:
a caller that must stay cheap there asks for the size alone. It knows nothing about what the files hold.

    >>> damage(None, "x", None) is None   # nothing recorded: nothing to hold the file to
    True
"""

from __future__ import annotations

import hashlib
import json
import posixpath

import pyarrow.parquet as pq

from dualview_core.storage.filesystems import SourceError, filesystem, is_remote
from dualview_core.storage.layout import MANIFEST

CHUNK = 1 << 22  # bytes hashed at a time: the digest streams, whatever the file's size


def _digest(fs, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _rows(fs, path: str) -> int | None:
    if not path.endswith(".parquet"):
        return None
    with fs.open(path, "rb") as f:
        return pq.ParquetFile(f).metadata.num_rows


def facts(fs, path: str) -> dict:
    """{bytes, rows (Parquet only, else None), sha256} of a file as it is now."""
    return {"bytes": fs.size(path), "rows": _rows(fs, path), "sha256": _digest(fs, path)}


def damage(fs, path: str, recorded: dict | None, *, rows: bool = True, full: bool = False) -> str | None:
    """None when `path` matches what was `recorded` of it; else what is wrong, in a few words. The size
    costs one request on an object store; `rows` reads the Parquet footer too, `full` the whole file."""
    if not recorded:
        return None
    try:
        size = fs.info(path)["size"]
    except FileNotFoundError:
        return "missing"
    if size != recorded["bytes"]:
        return f"{size} bytes where {recorded['bytes']} were published"
    if rows:
        try:
            found = _rows(fs, path)
        except Exception as exc:  # any unreadable footer is damage, whatever pyarrow calls it
            return f"unreadable ({type(exc).__name__})"
        if found != recorded.get("rows"):
            return f"{found} rows where {recorded.get('rows')} were published"
    if full and _digest(fs, path) != recorded["sha256"]:
        return "its content differs from what was published (sha256)"
    return None


def check_published(path: str, storage_options: dict | None = None) -> None:
    """Refuse, with one line naming it, a file whose folder's manifest says it was published otherwise
    (a synthesis output's dual views or rejections, cut short or replaced since): size and rows always,
    the sha256 too for a local file. Files no manifest speaks for pass: nothing holds them to anything."""
    fs, inner = filesystem(path, storage_options)
    manifest = posixpath.join(posixpath.dirname(inner), MANIFEST)
    if not fs.exists(manifest):
        return
    try:
        recorded = json.loads(fs.cat_file(manifest)).get("summary", {}).get("outputs", {}).get(posixpath.basename(inner))
    except ValueError:
        raise SourceError(f"{fs.unstrip_protocol(manifest)}: not a readable manifest (not JSON); run synthesis "
                          "again to rewrite it") from None
    problem = damage(fs, inner, recorded, full=not is_remote(path))  # a local file is hashed whole; cheap beside reading it
    if problem:
        raise SourceError(f"{path} is damaged: {problem}; run synthesis on it again to rebuild it from its records")
