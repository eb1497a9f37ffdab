"""Filesystems: a local path or an fsspec URL (s3://, …) to the filesystem that reads it.

The one place a path becomes an fsspec filesystem, so that storage options and the error a source
that cannot be opened gives are decided once. It knows nothing about what the files hold.

An object store gets connect and read timeouts and a bounded number of attempts unless the caller's
options set their own (`storage_defaults`), so an endpoint that never answers fails in well under a
minute; `unreachable` turns the error that ends such a wait into one line naming the endpoint.

    >>> storage_defaults("s3://b/x", {"anon": True})["config_kwargs"]["connect_timeout"]
    5
    >>> storage_defaults("/tmp/x", {})
    {}
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


# botocore's settings for every s3:// filesystem a caller does not configure itself: seconds to connect,
# seconds without a byte while reading, and attempts in all (botocore backs off between them)
S3_CONNECT_S, S3_READ_S, S3_ATTEMPTS = 5, 8, 3


def storage_defaults(path: str, storage_options: dict | None) -> dict:
    """`storage_options` with the object-store timeouts filled in where the caller set none."""
    options = dict(storage_options or {})
    if path.startswith(("s3://", "s3a://")):
        defaults = {"connect_timeout": S3_CONNECT_S, "read_timeout": S3_READ_S,
                    "retries": {"max_attempts": S3_ATTEMPTS, "mode": "standard"}}  # fresh: botocore edits it
        options["config_kwargs"] = {**defaults, **options.get("config_kwargs", {})}
    return options


def unreachable(exc: BaseException) -> str | None:
    """One line for a storage endpoint that refused or never answered (found anywhere in the error's
    chain), naming the endpoint and what was tried; None for any other error."""
    try:
        from botocore.exceptions import ConnectionClosedError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError
    except ImportError:
        return None
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)):
            url = exc.kwargs.get("endpoint_url", "?")
            what = "did not answer in time" if isinstance(exc, (ConnectTimeoutError, ReadTimeoutError)) else "refused the connection"
            return (f"storage endpoint {url} {what} ({S3_ATTEMPTS} attempts a call, {S3_CONNECT_S} s to "
                    f"connect and {S3_READ_S} s to read each, unless configured): check "
                    "--endpoint-url and that the server is up")
        exc = exc.__cause__ or exc.__context__
    return None


def filesystem(path: str, storage_options: dict | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `path` and the path within it."""
    try:
        fs, inner = fsspec.core.url_to_fs(path, **storage_defaults(path, storage_options))
        if hasattr(fs, "retries") and "config_kwargs" not in (storage_options or {}):
            fs.retries = 1  # s3fs's own loop would repeat botocore's attempts five times over
    except (ImportError, ValueError) as exc:
        raise SourceError(f"{path}: cannot open ({exc})") from exc
    return fs, inner
