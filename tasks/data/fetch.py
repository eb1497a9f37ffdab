"""`dualview data get`: a catalog entry's published files, from the hub at a pinned revision, into a folder.

Owns the I/O of getting published data: huggingface_hub's `snapshot_download` of the files the entry's
layout needs (`dualview_core.data.published.patterns`) into a local staging folder, then the copy or
row rewriting (`published.plan`, `published.mair_*`) into `DIR/<task>/` (or `DIR/promptriever/`), local
or on an object store, with a `_manifest.json` naming repo, revision, files and sizes. It does not know
what the tables hold beyond that; the eval-set and seed loaders read the result.

Resuming and re-runs are huggingface_hub's: the staging folder is a `local_dir` under HF_HOME, keyed by
repo and commit; a partial file (`.incomplete`) is resumed with a Range request, and a pinned commit
whose files are all present is answered from the tree listing huggingface_hub cached beside them, with
no request at all. A task folder whose manifest already says the same is not rewritten.

Every failure to reach the hub (refused, DNS, timeout, 404 for a repo, revision or file) becomes a
`SourceError` naming repo, revision and endpoint: the CLI prints it as one line and exits 2.
Memory: MAIR's rows are rewritten line by line; only one split's document ids are held at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dualview_core.data import published
from dualview_core.data.catalog import Source, catalog, suite_tasks
from dualview_core.storage.filesystems import SourceError, filesystem, is_remote

DEFAULT_ENDPOINT = "https://huggingface.co"
MANIFEST = "_manifest.json"  # leading _: loaders reading the folder skip it (data/sources.py)
COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass
class Fetched:
    """What one catalog entry's folder holds, as `_manifest.json` records it."""

    name: str
    folder: str
    repo: str
    revision: str
    layout: str
    config: str | None
    files: dict[str, int] = field(default_factory=dict)  # name in the folder -> bytes
    sources: list[dict] = field(default_factory=list)  # per repository: repo, revision, downloaded files

    @property
    def bytes(self) -> int:
        return sum(self.files.values())


def entries(name: str) -> list[tuple[str, Source]]:
    """(folder name, source) for a task, a suite (each of its tasks), or a seed set."""
    c = catalog()
    if name in c.seeds:
        return [(name, c.seeds[name].source)]
    unpublished = [t for t in suite_tasks(name) if c.tasks[t].source is None]
    if unpublished:  # the bundled sample: `dualview sample-path followir` says where it is
        raise SourceError(f"{', '.join(unpublished)}: not published on the hub (it ships with dualview; "
                          "`dualview sample-path followir` prints its folder)")
    return [(task, c.tasks[task].source) for task in suite_tasks(name)]


def hub_endpoint(explicit: str | None = None) -> str:
    """The hub to ask: the flag, else HF_ENDPOINT read now (huggingface_hub reads it once, at import)."""
    return (explicit or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def get(name: str, dest: str, revision: str | None = None, endpoint: str | None = None,
        storage_options: dict | None = None, staging: str | None = None, docs_revision: str | None = None,
        ) -> list[Fetched]:
    """Fetch every folder `name` stands for into `dest` (local or s3://); `revision` overrides the
    catalog's pin of the main repository, `docs_revision` that of MAIR's documents repository."""
    endpoint = hub_endpoint(endpoint)
    staging_root = Path(staging or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "dualview-data")
    out = []
    for folder, source in entries(name):
        pinned = source if revision is None else source.model_copy(update={"revision": revision})
        if docs_revision is not None and pinned.docs is not None:
            pinned = pinned.model_copy(update={"docs": pinned.docs.model_copy(update={"revision": docs_revision})})
        out.append(_get_one(folder, pinned, dest, endpoint, storage_options, staging_root))
    return out


def _get_one(folder: str, source: Source, dest: str, endpoint: str, storage_options, staging_root: Path) -> Fetched:
    main_dir, main_files = _download(source, endpoint, staging_root)
    fetched = Fetched(folder, posixpath.join(dest.rstrip("/"), folder), source.repo, source.revision,
                      source.layout, source.config)
    fetched.sources.append(_record(source, main_dir, main_files))
    with tempfile.TemporaryDirectory(prefix=f"dualview-{folder}-") as tmp:
        out = Path(tmp)
        if source.layout == "mair":
            docs_dir, docs_files = _download(source.docs, endpoint, staging_root)
            fetched.sources.append(_record(source.docs, docs_dir, docs_files))
            _write_mair(main_dir, main_files, docs_dir, docs_files, out)
        else:
            for copy in published.plan(source.layout, main_files):
                target = out / copy.dest
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(main_dir / copy.src, target)
        fetched.files = {p.relative_to(out).as_posix(): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
        if not fetched.files:
            raise SourceError(f"{source.repo}@{source.revision} ({endpoint}): no files of layout {source.layout} "
                              f"(patterns {published.patterns(source.layout, source.config)})")
        _publish(out, fetched, storage_options)
    return fetched


def _record(source: Source, local: Path, files: list[str]) -> dict:
    return {"repo": source.repo, "revision": source.revision, "config": source.config,
            "files": {f: (local / f).stat().st_size for f in files}}


def _download(source: Source, endpoint: str, staging_root: Path) -> tuple[Path, list[str]]:
    """snapshot_download of the layout's files at the pinned commit: (staging folder, files in it)."""
    from huggingface_hub import snapshot_download

    where = f"{source.repo}@{source.revision} from {endpoint}"
    if not COMMIT.fullmatch(source.revision):
        raise SourceError(f"{where}: the catalog pins no commit for this repository yet; pass --revision COMMIT "
                          "(a 40-hex commit from the repository's history)")
    local = staging_root / source.repo / source.revision
    allow = published.patterns(source.layout or "mair", source.config)
    with _online(), _as_source_error(where):
        snapshot_download(source.repo, repo_type="dataset", revision=source.revision, endpoint=endpoint,
                          local_dir=local, allow_patterns=allow, etag_timeout=30)
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*")
                   if p.is_file() and ".cache" not in p.relative_to(local).parts)
    return local, files


@contextlib.contextmanager
def _online() -> Iterator[None]:
    """`data get` is the one command meant to reach the hub: the project's environment sets
    HF_HUB_OFFLINE=1 for every other tool (flows/commands.project_env), which huggingface_hub has read
    into its constants at import, so lift it here for the duration of the download only."""
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved


@contextlib.contextmanager
def _as_source_error(where: str) -> Iterator[None]:
    """huggingface_hub's errors (and the connection errors under them) as one line naming the source."""
    import logging

    from huggingface_hub import errors

    # huggingface_hub retries a refused connection with backoff (about 25 s in all), logging a warning
    # per attempt: the one line below says it all, so its warnings stay out of stderr
    hub_logger = logging.getLogger("huggingface_hub")
    saved = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        yield
    except errors.LocalEntryNotFoundError as exc:  # raised when the listing failed and nothing is staged
        raise SourceError(f"{where}: cannot reach the hub ({_root_cause(exc)}); check the endpoint "
                          "(--hub-endpoint or HF_ENDPOINT) and the network") from exc
    except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError, errors.EntryNotFoundError) as exc:
        raise SourceError(f"{where}: {type(exc).__name__} (no such repository, revision or file)") from exc
    except (errors.HfHubHTTPError, errors.OfflineModeIsEnabled, OSError) as exc:
        raise SourceError(f"{where}: cannot reach the hub ({_root_cause(exc)}); check the endpoint "
                          "(--hub-endpoint or HF_ENDPOINT) and the network") from exc
    except Exception as exc:  # httpx's connect/timeout errors, unwrapped in some paths
        if "httpx" not in type(exc).__module__:
            raise
        raise SourceError(f"{where}: cannot reach the hub ({_root_cause(exc)})") from exc
    finally:
        hub_logger.setLevel(saved)


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _write_mair(qdir: Path, qfiles: list[str], ddir: Path, dfiles: list[str], out: Path) -> None:
    """queries.jsonl + corpus.jsonl (+ top_ranked.jsonl when the task has several splits, so each query
    is ranked against its own split's documents, as MAIR's evaluator does)."""
    splits = published.mair_splits(qfiles, dfiles)
    many = len(splits) > 1
    with open(out / "queries.jsonl", "w", encoding="utf-8") as queries, \
            open(out / "corpus.jsonl", "w", encoding="utf-8") as corpus, \
            contextlib.ExitStack() as stack:
        top = stack.enter_context(open(out / "top_ranked.jsonl", "w", encoding="utf-8")) if many else None
        for split, qfile, dfile in splits:
            scope = split if many else ""
            doc_ids = []
            for row in _jsonl(ddir / dfile):
                doc = published.mair_doc(row, scope)
                doc_ids.append(doc["id"])
                corpus.write(json.dumps(doc, ensure_ascii=False) + "\n")
            for row in _jsonl(qdir / qfile):
                query = published.mair_query(row, scope)
                queries.write(json.dumps(query, ensure_ascii=False) + "\n")
                if top is not None:
                    top.write(json.dumps({"qid": query["qid"], "pid": doc_ids}, ensure_ascii=False) + "\n")


def _jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _publish(local: Path, fetched: Fetched, storage_options: dict | None) -> None:
    """Copy the assembled folder to its destination, unless the manifest there already says the same."""
    manifest = json.dumps(asdict(fetched), indent=2, sort_keys=True, ensure_ascii=False)
    fs, folder = filesystem(fetched.folder, storage_options)
    target = posixpath.join(folder, MANIFEST)
    try:
        if fs.exists(target) and fs.cat_file(target).decode("utf-8") == manifest:
            return
    except (OSError, UnicodeDecodeError):
        pass
    if fs.exists(folder):
        fs.rm(folder, recursive=True)  # a stale folder from another revision must not leave tables behind
    if is_remote(fetched.folder):
        fs.put(str(local) + "/", folder, recursive=True)
    else:
        shutil.copytree(local, folder)
    with fs.open(target, "w") as f:  # last: a folder with a manifest is complete
        f.write(manifest)
