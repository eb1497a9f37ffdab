"""A local stand-in for the Hugging Face hub, enough for huggingface_hub's `snapshot_download` of a
dataset repository: a stdlib HTTP server on 127.0.0.1, in a thread, serving folders of files.

Answers what huggingface_hub (2.4) asks for a dataset (read from its `hf_api.py`, `file_download.py`):
- `GET /api/datasets/{repo}/revision/{rev}`: repo info with `sha` and `siblings` (a branch name resolves
  to the repository's one commit);
- `GET /api/datasets/{repo}/tree/{rev}[/path]?recursive=...`: `[{type, path, size, oid}]`, one page;
- `HEAD|GET /datasets/{repo}/resolve/{rev}/{path}`: the bytes with `X-Repo-Commit`, `ETag` and
  `Content-Length`; a `Range: bytes=N-` request gets a 206 with the rest (how an interrupted download
  resumes).
An unknown repository, revision or file is a 404 with `X-Error-Code` as the hub sends it. Every request
is logged (`requests`), so tests can count what was downloaded; `cut_after` makes the server drop a
file body after that many bytes, once, to interrupt a download.

Repositories are folders `root/<owner>/<name>/` (see tests/fixtures/hub). Each answers to the commits
`commits` gives it (the catalog's pins, say) and to `commit_of(repo)`, derived from its name, so that
tests can pin a repository the catalog has no commit for; all of them name the same files.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


def commit_of(repo: str) -> str:
    """The one commit a served repository has: 40 hex digits derived from its id."""
    return hashlib.sha1(repo.encode()).hexdigest()


class HubServer:
    def __init__(self, root: Path, commits: dict[str, list[str]] | None = None):
        self.root = Path(root)
        self.commits = commits or {}
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.cut_after: dict[str, int] = {}  # file path in repo -> bytes to send before dropping, once
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self) -> list[str]:
        """Paths of the file bodies served (GET .../resolve/...)."""
        return [p for m, p in self.requests if m == "GET" and "/resolve/" in p]

    def commits_of(self, repo: str) -> list[str]:
        return [*self.commits.get(repo, []), commit_of(repo)]

    def files(self, repo: str) -> list[Path]:
        base = self.root / repo
        return sorted(p for p in base.rglob("*") if p.is_file())


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: the tests read hub.requests instead
            pass

        def do_HEAD(self) -> None:
            self._route(body=False)

        def do_GET(self) -> None:
            self._route(body=True)

        def _route(self, body: bool) -> None:
            hub.requests.append((self.command, self.path))
            url = urlparse(self.path)
            parts = [unquote(p) for p in url.path.split("/") if p]
            if parts[:2] == ["api", "datasets"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
                repo, kind, rev = f"{parts[2]}/{parts[3]}", parts[4], parts[5]
                if not self._known(repo, rev):
                    return
                if kind == "revision":
                    return self._json(self._info(repo, rev))
                recursive = parse_qs(url.query).get("recursive", ["False"])[0].lower() == "true"
                return self._json(self._tree(repo, "/".join(parts[6:]), recursive))
            if parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":
                repo, rev, path = f"{parts[1]}/{parts[2]}", parts[4], "/".join(parts[5:])
                if self._known(repo, rev):
                    self._file(repo, rev, path, body)
                return
            self._error(404, "EntryNotFound", "no such route")

        def _known(self, repo: str, rev: str) -> bool:
            if not (hub.root / repo).is_dir():
                self._error(404, "RepoNotFound", f"Repository {repo} not found")
                return False
            if rev not in (*hub.commits_of(repo), "main"):
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return False
            return True

        def _info(self, repo: str, rev: str) -> dict:
            base = hub.root / repo
            sha = hub.commits_of(repo)[0] if rev == "main" else rev
            return {"id": repo, "sha": sha, "private": False, "disabled": False,
                    "siblings": [{"rfilename": p.relative_to(base).as_posix()} for p in hub.files(repo)]}

        def _tree(self, repo: str, under: str, recursive: bool) -> list[dict]:
            base = hub.root / repo
            out = []
            for p in hub.files(repo):
                rel = p.relative_to(base).as_posix()
                if under and not rel.startswith(under.rstrip("/") + "/"):
                    continue
                if not recursive and "/" in rel[len(under):].strip("/"):
                    continue
                out.append({"type": "file", "path": rel, "size": p.stat().st_size, "oid": _oid(p)})
            return out

        def _file(self, repo: str, rev: str, path: str, body: bool) -> None:
            p = hub.root / repo / path
            if not p.is_file():
                return self._error(404, "EntryNotFound", f"{path} not found")
            data = p.read_bytes()
            start = 0
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes=") and body:
                start = int(ranged[len("bytes="):].split("-")[0] or 0)
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", hub.commits_of(repo)[0] if rev == "main" else rev)
            self.send_header("ETag", f'"{_oid(p)}"')
            self.send_header("Content-Length", str(len(data) - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            cut = hub.cut_after.pop(path, None)
            if cut is not None:
                self.wfile.write(data[start:start + cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # the body ends early: the client sees a broken transfer
                return
            self.wfile.write(data[start:])

        def _json(self, obj: object) -> None:
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(data)

        def _error(self, status: int, code: str, message: str) -> None:
            data = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(data)

    return Handler


def _oid(path: Path) -> str:
    """The git blob id the hub reports as a file's `oid` and ETag."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def build_root(fixtures: Path, root: Path) -> Path:
    """The served tree: `fixtures` copied to `root`, each `x.parquet.jsonl` written as the Parquet file
    `x.parquet` the hub holds (text fixtures in the repository, the published binary format on the wire)."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    for src in sorted(Path(fixtures).rglob("*")):
        if not src.is_file():
            continue
        dest = root / src.relative_to(fixtures)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.name.endswith(".parquet.jsonl"):
            rows = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
            pq.write_table(pa.Table.from_pylist(rows), dest.with_name(src.name.removesuffix(".jsonl")))
        else:
            shutil.copyfile(src, dest)
    return root
