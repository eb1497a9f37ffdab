"""`dualview data get` against a local hub-compatible server serving the published layouts
(tests/helpers/hub_server.py, tests/fixtures/hub): every task's folder loads with the project's loaders,
re-runs and interruptions cost what huggingface_hub promises, and a hub that cannot be reached is one
line and exit 2."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from dualview_core.data.evalsets import load_eval_set
from dualview_core.data.loading import read_seeds
from flows.cli import main
from tests.helpers.hub_server import commit_of
from tests.helpers.published_hub import pin_args, published_hub
from tests.helpers.services import free_port

pytestmark = pytest.mark.integration
@pytest.fixture
def hub(tmp_path, monkeypatch):
    with published_hub(tmp_path, monkeypatch) as server:
        yield server


def get(capsys, name: str, dest: str, *extra: str) -> tuple[int, dict | None, str]:
    code = main(["data", "get", name, "--to", dest, *(pin_args(name) if "--revision" not in extra else []), *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


@pytest.mark.parametrize("task, views", [
    ("robust04", {"og", "changed"}), ("news21", {"og", "changed"}), ("core17", {"og", "changed"}),
    ("infosearch-length", {"og", "changed", "reversed"}), ("infosearch-keyword", {"og", "changed", "reversed"}),
    ("ifeval", {"og"}), ("instructir", {"og"}),
])
def test_each_task_lands_in_a_folder_the_eval_set_loader_reads(hub, tmp_path, capsys, task, views):
    code, summary, err = get(capsys, task, str(tmp_path / "data"))
    assert code == 0, err
    folder = Path(summary[task]["folder"])
    assert folder == tmp_path / "data" / task
    load = load_eval_set(str(folder))
    assert load.quarantined == 0, load.dropped()
    es = load.eval_set
    assert set(es.views()) == views
    assert es.corpus.num_rows > 0 and es.qrels.num_rows > 0
    manifest = json.loads((folder / "_manifest.json").read_text())
    assert manifest["repo"] == summary[task]["repo"] and manifest["revision"] == summary[task]["revision"]
    assert sum(manifest["files"].values()) == summary[task]["bytes"]
    assert "README.md" not in json.dumps(manifest["sources"])  # only the layout's files were downloaded


def test_mair_many_splits_rank_each_query_against_its_own_split(hub, tmp_path, capsys):
    code, summary, err = get(capsys, "ifeval", str(tmp_path))
    assert code == 0, err
    es = load_eval_set(str(tmp_path / "ifeval")).eval_set
    assert es.corpus.num_rows == 6  # two splits of 3 documents, whose ids repeat across splits
    top = {r["query_id"]: r["doc_ids"] for r in es.top_ranked.to_pylist()}
    split = "combination__two_responses"
    assert top[f"{split}/1"] == [f"{split}/0", f"{split}/1", f"{split}/2"]
    fetched = [f for s in json.loads((tmp_path / "ifeval" / "_manifest.json").read_text())["sources"] for f in s["files"]]
    assert fetched and all(f.startswith("IFEval/") for f in fetched)  # not APPS, not InstructIR


def test_the_seed_set_lands_where_the_seed_loader_reads(hub, tmp_path, capsys):
    code, summary, err = get(capsys, "promptriever", str(tmp_path))
    assert code == 0, err
    load = read_seeds(str(tmp_path / "promptriever"))
    assert load.report.as_dict()["rows"] == 8 and load.quarantine.num_rows == 0


def test_a_suite_fetches_each_of_its_tasks(hub, tmp_path, capsys):
    code, summary, err = get(capsys, "followir", str(tmp_path))
    assert code == 0, err
    assert list(summary) == ["robust04", "news21", "core17"]
    assert all((tmp_path / t / "_manifest.json").is_file() for t in summary)


def test_a_rerun_downloads_nothing(hub, tmp_path, capsys):
    assert get(capsys, "news21", str(tmp_path))[0] == 0
    first = len(hub.requests)
    assert first > 0
    before = (tmp_path / "news21" / "_manifest.json").stat().st_mtime_ns
    assert get(capsys, "news21", str(tmp_path))[0] == 0
    assert len(hub.requests) == first  # pinned commit, files present: answered from huggingface_hub's tree cache
    assert (tmp_path / "news21" / "_manifest.json").stat().st_mtime_ns == before  # same manifest: not rewritten


def test_an_interrupted_download_resumes(hub, tmp_path, capsys):
    corpus = "corpus/test-00000-of-00001.parquet"
    size = (hub.root / "mteb/Core17InstructionRetrieval" / corpus).stat().st_size
    hub.cut_after[corpus] = size // 2
    code, _, err = get(capsys, "core17", str(tmp_path))
    if code != 0:  # huggingface_hub gave up after the cut: the next run resumes from the partial file
        assert len(err.strip().splitlines()) == 1, err
        code, _, err = get(capsys, "core17", str(tmp_path))
    assert code == 0, err
    ranged = [p for m, p in hub.requests if m == "GET" and p.endswith(corpus)]
    assert len(ranged) == 2  # the cut transfer, then one that asked for the rest
    assert load_eval_set(str(tmp_path / "core17")).eval_set.corpus.num_rows == 4


def test_an_unreachable_hub_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    closed = f"http://127.0.0.1:{free_port()}"
    code, _, err = get(capsys, "news21", str(tmp_path / "data"), "--hub-endpoint", closed)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "mteb/News21InstructionRetrieval@c6fffeb9cdd95c1ffa81c62c687b48b56352872b" in lines[0]
    assert closed in lines[0]


def test_an_unknown_revision_is_one_line_and_exit_2(hub, tmp_path, capsys):
    code, _, err = get(capsys, "news21", str(tmp_path), "--revision", "f" * 40)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "f" * 40 in err and hub.url in err


def test_an_unpinned_entry_asks_for_a_revision(hub, tmp_path, capsys):
    code = main(["data", "get", "infosearch-length", "--to", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--revision" in err and len(err.strip().splitlines()) == 1


def test_revision_override_requests_that_revision(hub, tmp_path, capsys):
    other = commit_of("mteb/News21InstructionRetrieval")
    code, summary, err = get(capsys, "news21", str(tmp_path), "--revision", other)
    assert code == 0, err
    assert summary["news21"]["revision"] == other
    files = [p for m, p in hub.requests if "/resolve/" in p or "/tree/" in p]
    assert files and all(f"/{other}" in p for p in files)


def test_an_s3_destination(hub, tmp_path, capsys, s3_server, s3_options):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_options)
    bucket = f"data-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    dest = f"s3://{bucket}/published"
    code, summary, err = get(capsys, "infosearch-keyword", dest, "--endpoint-url", s3_server)
    assert code == 0, err
    folder = summary["infosearch-keyword"]["folder"]
    assert folder == f"{dest}/infosearch-keyword"
    es = load_eval_set(folder, storage_options=s3_options).eval_set
    assert set(es.views()) == {"og", "changed", "reversed"}
    assert os.path.basename(folder) == "infosearch-keyword"
