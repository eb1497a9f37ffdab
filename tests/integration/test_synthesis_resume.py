"""kill -9 at a realistic size: thousands of realistic seeds, shards of 512 rows, the openai engine
through Ray Data, 16 requests in flight against a local endpoint that answers in 50 ms. A run killed
(driver, Ray and all) once some shards are published resumes to exactly the records and outputs of an
uninterrupted run, and asks again only for what was lost: the calls in flight and the answers not yet
in a shard."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from aiohttp import web

from dualview_core import sample
from tests.helpers.services import kill_session, serve, stop_serving

VARIANTS = 64  # x 66 eligible sample seeds = 4,224 rows
SHARD_ROWS = 512
IN_FLIGHT = 16
CALLS: Counter = Counter()  # requests the endpoint answered, by prompt (one a row)


def realistic_seeds(path: Path) -> int:
    """Every eligible sample seed (MS MARCO-sized passages) in VARIANTS distinct variants."""
    rows = [json.loads(line) for line in Path(sample.seeds_path()).read_text(encoding="utf-8").splitlines()]
    eligible = [r for r in rows if r["has_instruction"] and r["new_negatives"]]
    with open(path, "w", encoding="utf-8") as out:
        for k in range(VARIANTS):
            for r in eligible:
                only = f"{r['only_query']} (case {k})"
                out.write(json.dumps({**r, "query_id": f"{r['query_id']}-{k}", "only_query": only,
                                      "query": f"{only} {r['only_instruction']}"}) + "\n")
    return VARIANTS * len(eligible)


@pytest.fixture(scope="module")
def endpoint():
    """An OpenAI-shaped endpoint answering each prompt with an instruction derived from its query (so
    the answers, and the outputs, depend on nothing but the row), 50 ms a request: slower than judging
    and publishing, as an LLM is."""
    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        query = user.split("\n", 1)[0].removeprefix("QUERY: ")
        CALLS[user] += 1
        await asyncio.sleep(0.05)
        instruction = (f"Only sources that report measured outcomes for {query}, with numbers." if len(query) % 3
                       else "Sure! Here is one.")  # a third of the rows rejected as chatter
        text = f"<answer><new_instruction>{instruction}</new_instruction></answer>"
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": text}}],
                                  "usage": {"prompt_tokens": 900, "completion_tokens": 20}})

    started: list = []
    yield serve(handle, started)
    stop_serving(started)


def cli(seeds: Path, out: Path, endpoint: str) -> list[str]:
    return [str(Path(sys.executable).parent / "dualview"), "synthesize", "--seeds", str(seeds), "--out", str(out),
            "--engine", "openai", "--base-url", endpoint, "--model", "fast", "--concurrency", str(IN_FLIGHT),
            "--shard-rows", str(SHARD_ROWS)]


def records(out: Path) -> dict[str, dict]:
    """cache_key -> the record's answer columns, over every published shard (duplicates fail)."""
    found: dict[str, dict] = {}
    for shard in sorted((out / "records").glob("part-*.parquet")):
        for rec in pq.read_table(shard, columns=["cache_key", "raw_response", "rejection", "instruction"]).to_pylist():
            assert rec["cache_key"] not in found, f"{rec['cache_key']} recorded twice"
            found[rec["cache_key"]] = rec
    return found


def outputs(out: Path) -> tuple[list, list]:
    views = sorted(pq.read_table(out / "dual_views.parquet").to_pylist(), key=lambda v: (v["query_id"], v["instruction"]))
    rejected = sorted(r["cache_key"] for r in pq.read_table(out / "rejections.parquet", columns=["cache_key"]).to_pylist())
    return views, rejected


@pytest.mark.slow
def test_kill_9_at_a_realistic_size_resumes_to_the_uninterrupted_run(endpoint, tmp_path):
    seeds, whole, killed = tmp_path / "seeds.jsonl", tmp_path / "whole", tmp_path / "killed"
    total = realistic_seeds(seeds)
    CALLS.clear()
    subprocess.run(cli(seeds, whole, endpoint), check=True, capture_output=True, timeout=900)
    expected = records(whole)
    assert len(expected) == total
    assert len(CALLS) == total and set(CALLS.values()) == {1}  # every row asked once

    CALLS.clear()
    proc = subprocess.Popen(cli(seeds, killed, endpoint), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    while not list((killed / "records").glob("part-*.parquet")) and time.monotonic() < deadline:
        assert proc.poll() is None, "the run finished before it could be killed"
        time.sleep(0.02)
    kill_session(proc.pid)  # driver, Ray and every worker, mid-stream
    proc.wait()
    time.sleep(0.5)  # requests already on the wire reach the endpoint and are counted as the killed run's
    published = len(records(killed))
    killed_calls = Counter(CALLS)  # requests the killed run made, in flight at the kill included
    CALLS.clear()
    assert 0 < published < total and published % SHARD_ROWS == 0 and not (killed / "manifest.json").exists()
    assert list(killed.glob(".work/staged/*.parquet"))  # the killed run's staged input, left behind

    resumed = subprocess.run(cli(seeds, killed, endpoint), capture_output=True, timeout=900, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)  # stdout holds the summary alone (no Ray warning in it)
    assert summary["plan"]["cached"] == published and summary["plan"]["pending"] == total - published
    assert records(killed) == expected  # every row once, with the same answer and verdict
    views, rejected = outputs(killed)
    assert (views, rejected) == outputs(whole) and len(views) > 0 and len(rejected) > 0
    assert not (killed / ".work").exists()  # the killed run's staged input is gone after the resume
    # every row asked, none twice in a run; asked again: the calls in flight at the kill, and answers that
    # were not yet in a shard (a publisher gathering one, the driver's short batches)
    assert max(killed_calls.values()) == 1 and max(CALLS.values()) == 1
    assert len(killed_calls | CALLS) == total
    assert sum((killed_calls & CALLS).values()) <= IN_FLIGHT + 2 * SHARD_ROWS


@pytest.mark.slow
def test_a_row_repeated_in_a_chunk_is_asked_once(endpoint, tmp_path):
    """Two rows with one identity (the second quarantined as duplicate_id): the stream sends the first
    row's calls only, so the cost counts each call once."""
    rows = [json.loads(line) for line in Path(sample.seeds_path()).read_text(encoding="utf-8").splitlines()]
    eligible = [r for r in rows if r["has_instruction"] and r["new_negatives"]]
    seeds = tmp_path / "seeds.jsonl"
    with open(seeds, "w", encoding="utf-8") as out:
        for r in eligible:
            out.write(json.dumps(r) + "\n")
            newer = " Newer sources first."  # the same query_id, another instruction
            out.write(json.dumps({**r, "only_instruction": r["only_instruction"] + newer, "query": r["query"] + newer}) + "\n")
    CALLS.clear()
    run = subprocess.run(cli(seeds, tmp_path / "out", endpoint), capture_output=True, timeout=600, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["seeds"]["by_reason"]["duplicate_id"] == len(eligible)
    assert len(CALLS) == summary["cost"]["engine_rows"] == len(records(tmp_path / "out")) and set(CALLS.values()) == {1}
    assert all("Newer sources first." not in prompt for prompt in CALLS)


@pytest.mark.slow
def test_a_run_that_only_judges_again_starts_no_engine(endpoint, tmp_path):
    """Same seeds, same shards, another filtering policy: every call is cached, so the run is not
    streamed and the engine (minutes for a large model) is never started; the outputs follow the new
    policy. Removing a shard makes its calls pending again, and the engine starts."""
    rows = [json.loads(line) for line in Path(sample.seeds_path()).read_text(encoding="utf-8").splitlines()]
    seeds, out = tmp_path / "seeds.jsonl", tmp_path / "out"
    seeds.write_text("".join(json.dumps(r) + "\n" for r in rows if r["has_instruction"] and r["new_negatives"]),
                     encoding="utf-8")
    first = subprocess.run(cli(seeds, out, endpoint), capture_output=True, timeout=600, text=True)
    assert first.returncode == 0 and "starting the Ray Data client stage" in first.stderr, first.stderr[-3000:]
    guarded = json.loads(first.stdout)
    assert guarded["filtering"] == "guards" and guarded["rejected"] > 0  # the endpoint's chatter

    CALLS.clear()
    again = subprocess.run([*cli(seeds, out, endpoint), "--filtering", "none"], capture_output=True, timeout=600, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    assert "starting the Ray Data client stage" not in again.stderr and not CALLS
    assert summary["plan"]["pending"] == 0 and summary["filtering"] == "none"
    assert summary["dual_views"] + summary["rejected"] == guarded["dual_views"] + guarded["rejected"]
    assert summary["outcomes"]["guard_verdicts"] == guarded["outcomes"]["guard_verdicts"]  # computed, not applied

    sorted((out / "records").glob("part-*.parquet"))[-1].unlink()
    last = subprocess.run([*cli(seeds, out, endpoint), "--filtering", "none"], capture_output=True, timeout=600, text=True)
    assert last.returncode == 0 and "starting the Ray Data client stage" in last.stderr, last.stderr[-3000:]
    assert 0 < json.loads(last.stdout)["plan"]["pending"] == len(CALLS)
