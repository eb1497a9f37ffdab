"""Filesystems: a local path or an fsspec URL (s3://, …) to the filesystem that reads it.

The one place a path becomes an fsspec filesystem, so that storage options and the error a source
that cannot be opened gives are decided once. It knows nothing about what the files hold.
"""

from __future__ import annotations

import fsspec


class SourceError(Exception):
    """The source as a whole cannot be read: missing, unreadable, or an unsupported format."""


def is_remote(path: str) -> bool:
    """Whether `path` names an object store or other non-local filesystem (s3://, gs://, …).

        >>> is_remote("s3://bucket/x"), is_remote("/tmp/x"), is_remote("file:///tmp/x")
        (True, False, False)
    """
    return "://" in path and not path.startswith("file://")


def filesystem(path: str, storage_options: dict | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `path` and the path within it."""
    try:
        fs, inner = fsspec.core.url_to_fs(path, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise SourceError(f"{path}: cannot open ({exc})") from exc
    return fs, inner
