"""The local hub-compatible server serving the published layouts of tests/fixtures/hub, set up as
`dualview data get` finds the hub (HF_ENDPOINT), and the pins a test passes for catalog entries
without a pinned commit yet."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dualview_core.data.catalog import catalog
from tests.helpers.hub_server import HubServer, build_root, commit_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hub"
# catalog entries without a pinned commit yet: the tests pin the server's own commit for them
UNPINNED = {"infosearch-length": "jianqunZ/Length-v1", "ifeval": "MAIR-Bench/MAIR-Queries",
            "instructir": "MAIR-Bench/MAIR-Queries", "promptriever": "samaya-ai/msmarco-w-instructions"}


def pins() -> dict[str, list[str]]:
    """repo -> the full commits the catalog pins for it: the server answers those."""
    c = catalog()
    sources = [t.source for t in c.tasks.values() if t.source] + [s.source for s in c.seeds.values()]
    sources += [s.docs for s in sources if s.docs is not None]
    out: dict[str, list[str]] = {}
    for s in sources:
        if len(s.revision) == 40:
            out.setdefault(s.repo, []).append(s.revision)
    return out


def pin_args(name: str) -> list[str]:
    """The `data get` flags task `name` needs against the local server (its unpinned revisions)."""
    pin = ["--revision", commit_of(UNPINNED[name])] if name in UNPINNED else []
    if name in ("ifeval", "instructir"):
        pin += ["--docs-revision", commit_of("MAIR-Bench/MAIR-Docs")]
    return pin


@contextmanager
def published_hub(tmp_path: Path, monkeypatch) -> Iterator[HubServer]:
    root = build_root(FIXTURES, tmp_path / "hub")
    with HubServer(root, pins()) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("HF_UPDATE_DOWNLOAD_COUNTS", "0")
        yield server
