"""The OpenAI-compatible client against a scripted local HTTP server: retries, timeouts, no key leaks."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter

import pytest
from aiohttp import web

from dualview_core.config import OpenAIEngineConfig, SamplingConfig
from tasks.synthesis.openai_client import ChatClient
from tests.helpers.services import free_port, serve, stop_serving

pytestmark = pytest.mark.integration
SECRET = "sk-test-do-not-leak-1234"


class Script:
    """Answers in order: an int is an HTTP status, a float a delay in seconds before answering 200.
    It continues a prefill and echoes it back, as vLLM's server does."""

    def __init__(self, steps):
        self.steps, self.seen = list(steps), []
        self.in_flight = self.peak = 0
        self.peers: set = set()  # the client's (host, port) per connection

    async def handle(self, request: web.Request) -> web.Response:
        self.peers.add(request.transport.get_extra_info("peername"))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request) -> web.Response:
        self.seen.append({"auth": request.headers.get("Authorization"), "body": await request.json()})
        step = self.steps.pop(0) if self.steps else 200
        if isinstance(step, float):
            await asyncio.sleep(step)
            step = 200
        if step != 200:
            return web.json_response({"error": "scripted"}, status=step)
        body = self.seen[-1]["body"]
        echoed = body["messages"][-1]["content"] if body.get("echo") and body.get("continue_final_message") else ""
        return web.json_response({"choices": [{"message": {"content": echoed + "Only X.</new_instruction>"}}],
                                  "usage": {"prompt_tokens": 11, "completion_tokens": 3}})


@pytest.fixture
def server():
    def start(steps):
        script = Script(steps)
        return script, serve(script.handle, started)

    started: list = []
    yield start
    stop_serving(started)


def complete(base_url: str | None, rows: int = 1, **cfg) -> list[dict]:
    client = ChatClient(OpenAIEngineConfig(**({"base_url": base_url} if base_url else {}), model="m", backoff_s=0.01, **cfg),
                        SamplingConfig(max_tokens=8, prefill="<answer><new_instruction>"))

    async def run() -> list[dict]:
        try:
            return await client.complete_all([{"cache_key": f"k{i}", "messages": [{"role": "user", "content": "hi"}]}
                                              for i in range(rows)])
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_success_carries_prefill_usage_and_continuation_flags(server):
    script, url = server([200])
    [result] = complete(url)
    assert result["raw_response"] == "<answer><new_instruction>Only X.</new_instruction>"
    assert (result["prompt_tokens"], result["completion_tokens"], result["attempts"], result["error"]) == (11, 3, 1, None)
    body = script.seen[0]["body"]
    assert body["messages"][-1] == {"role": "assistant", "content": "<answer><new_instruction>"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False and body["echo"] is True


def test_retries_5xx_and_429_then_succeeds(server):
    script, url = server([503, 429, 200])
    [result] = complete(url)
    assert result["attempts"] == 3 and result["error"] is None and len(script.seen) == 3


def test_timeouts_are_retried_and_give_up_after_max_attempts(server):
    script, url = server([1.0, 1.0, 1.0])
    [result] = complete(url, timeout_s=0.2, max_attempts=3)
    assert result["raw_response"] is None and result["attempts"] == 3 and result["error"] == "ReadTimeout"


def test_client_errors_are_not_retried(server):
    script, url = server([400])
    [result] = complete(url)
    assert result["attempts"] == 1 and result["error"].startswith("RuntimeError: HTTP 400") and len(script.seen) == 1


def test_connection_refused_is_retried_then_recorded():
    [result] = complete(f"http://127.0.0.1:{free_port()}/v1", max_attempts=2)
    assert result["attempts"] == 2 and result["error"] == "ConnectError"


def test_api_key_goes_only_into_the_header(server, monkeypatch):
    monkeypatch.setenv("DV_TEST_KEY", SECRET)
    script, url = server([500, 400])
    [result] = complete(url, api_key_env="DV_TEST_KEY")
    assert script.seen[0]["auth"] == f"Bearer {SECRET}"
    assert SECRET not in json.dumps(result) and SECRET not in json.dumps(script.seen[0]["body"])
    client = ChatClient(OpenAIEngineConfig(api_key_env="DV_TEST_KEY"), SamplingConfig())
    assert SECRET not in repr(client.cfg) and SECRET not in OpenAIEngineConfig(api_key_env="DV_TEST_KEY").model_dump_json()


def test_concurrency_is_bounded(server):
    script, url = server([0.2] * 6)
    results = complete(url, rows=6, concurrency=2)
    assert all(r["error"] is None for r in results)
    assert script.peak == 2 and len(script.seen) == 6


def test_one_session_holds_every_row_on_its_own_connections(server):
    """The connector's limit matches the concurrency: 12 rows, 3 at a time, over at most 3 connections."""
    script, url = server([0.05] * 12)
    results = complete(url, rows=12, concurrency=3)
    assert all(r["error"] is None for r in results) and len(script.seen) == 12 and script.peak == 3
    assert len(script.peers) == 3  # reused: 12 requests, 3 connections


# --- several endpoints -----------------------------------------------------------------------

def test_rows_spread_over_endpoints_by_key_and_a_dead_one_fails_over(server):
    from tasks.synthesis.openai_client import endpoint_index

    first, url_a = server([])
    second, url_b = server([])
    dead = f"http://127.0.0.1:{free_port()}/v1"
    results = complete(None, rows=20, base_urls=(url_a, url_b, dead), max_attempts=2)
    assert [r["cache_key"] for r in results] == [f"k{i}" for i in range(20)]
    assert all(r["error"] is None for r in results)
    picks = [endpoint_index(f"k{i}", 1, 3) for i in range(20)]
    # a row whose first pick is the dead endpoint answers on its second attempt, from the next one (index 0)
    assert [r["attempts"] for r in results] == [2 if p == 2 else 1 for p in picks]
    assert len(first.seen) == picks.count(0) + picks.count(2) and len(second.seen) == picks.count(1)
    assert picks.count(2) > 0 and picks.count(1) > 0


# --- a server that answers from scratch, and one that continues the prefill -----------------------

CHATTER = "Sure! Here is a new instruction: focus on measurements."


def scripted_instruction(i: int) -> str:
    return f"Find studies that report measured results for setting number {i}, not general advice."


class Writer:
    """A scripted model behind an OpenAI-compatible endpoint. Per seed (found by its QUERY line) it
    writes a clean answer, a think block + a stray line + the answer, or tagless chatter. With
    `honours_prefill` it continues `continue_final_message` and echoes the prefill, as vLLM's server
    does; without, it ignores both and answers from scratch, as many hosted servers do. Verification
    requests get three yeses for even-numbered seeds and a 'no' for odd ones."""

    def __init__(self, kinds: dict[str, tuple[int, str]], honours_prefill: bool):
        self.kinds, self.honours_prefill, self.calls = kinds, honours_prefill, 0

    def reply(self, body: dict) -> str:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        i, kind = self.kinds[user.split("\n", 1)[0].removeprefix("QUERY: ")]
        last = body["messages"][-1]
        honoured = self.honours_prefill and body.get("continue_final_message") and last["role"] == "assistant"
        if user.split("\n")[1].startswith("INSTRUCTION:"):  # the verification prompt
            verdict = "yes" if i % 2 == 0 else "no"
            full = f"<verdict><satisfies>{verdict}</satisfies><violates>yes</violates><on_topic>yes</on_topic></verdict>"
            return last["content"] + full.removeprefix(last["content"]) if honoured else full
        if honoured:  # the model goes on from '<answer><new_instruction>' and stops at the closing tag
            return last["content"] + (CHATTER if kind == "chatter" else scripted_instruction(i))
        return {"clean": f"<answer><new_instruction>{scripted_instruction(i)}</new_instruction></answer>",
                "think": f"<think>A is about kits, B about numbers.</think>\nReasoning done.\n"
                         f"<answer><new_instruction>{scripted_instruction(i)}</new_instruction></answer>",
                "chatter": CHATTER}[kind]

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        content = self.reply(await request.json())
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": content}}],
                                  "usage": {"prompt_tokens": 700, "completion_tokens": 20}})


def thirty_seeds(tmp_path) -> tuple[str, dict[str, tuple[int, str]]]:
    """The first 30 eligible sample seeds, and the scripted mix: 18 clean, 5 think + line, 7 chatter."""
    import json as _json

    from dualview_core import sample

    rows = [_json.loads(line) for line in open(sample.seeds_path(), encoding="utf-8")]
    rows = [r for r in rows if r["has_instruction"] and r["new_negatives"]][:30]
    path = tmp_path / "seeds.jsonl"
    path.write_text("".join(_json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    kinds = {r["only_query"]: (i, "clean" if i < 18 else "think" if i < 23 else "chatter") for i, r in enumerate(rows)}
    return str(path), kinds


def start_writer(writer: Writer, started: list) -> str:
    return serve(writer.handle, started)


@pytest.mark.slow
def test_the_accepted_set_is_the_same_whether_the_server_continues_the_prefill_or_not(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import tasks.synthesis.publishing
    from dualview_core.config import SynthesisConfig
    from tasks.synthesis.driver import UNCHANGED, run_synthesis

    # every engine the run builds counted: verification starts its engine once, for all the rows
    built = []
    make_engine = tasks.synthesis.publishing.make_engine
    monkeypatch.setattr(tasks.synthesis.publishing, "make_engine", lambda cfg, path=None, prompted=False: built.append(cfg.sampling) or make_engine(cfg, path, prompted))
    seeds, kinds = thirty_seeds(tmp_path)
    results, started = {}, []
    try:
        for honours in (False, True):
            writer = Writer(kinds, honours)
            cfg = SynthesisConfig(engine="openai", filtering="verify" if honours else "guards", shard_rows=8,
                                  openai=OpenAIEngineConfig(base_url=start_writer(writer, started), model="scripted", concurrency=4))
            out = tmp_path / f"out-{honours}"
            summary = run_synthesis(seeds, str(out), cfg, progress=lambda m: None)
            views = pq.read_table(out / "dual_views.parquet").to_pylist()
            rejections = pq.read_table(out / "rejections.parquet").to_pylist()
            results[honours] = (summary, views, rejections, writer.calls)
            assert built == ([cfg.sampling, cfg.verify_sampling] if honours else [cfg.sampling])
            built.clear()
            if honours:  # unchanged, and every verdict final: nothing is asked, read or rewritten
                lines: list[str] = []
                again = run_synthesis(seeds, str(out), cfg, progress=lines.append)
                assert writer.calls == results[honours][3] and again["cost"]["verify_rows"] == 0
                assert again["outcomes"] == summary["outcomes"] and built == [] and UNCHANGED in lines
    finally:
        stop_serving(started)

    scratch, views, rejections, calls = results[False]
    assert calls == 30 and _counts(scratch) == {"accepted": 23, "rejected": 7, "by_reason": {"no_answer": 7}}
    assert {v["instruction"] for v in views} == {scripted_instruction(i) for i in range(23)}  # nothing merged in
    assert all(r["query_id"] and r["query"] and r["original_instruction"] for r in rejections)
    honoured, views_h, rejections_h, calls_h = results[True]
    assert calls_h == 30 + 23  # the first pass, then one verification per accepted row
    # the first pass accepts the same 23; chatter written inside the tags is caught by the guards
    assert honoured["cost"]["accepted"] == 23 and honoured["cost"]["rejections"] == {"chatter": 7}
    assert honoured["cost"]["verify_checked"] == 23 and honoured["cost"]["verify_failed"] == 11
    assert _counts(honoured) == {"accepted": 12, "rejected": 18, "by_reason": {"chatter": 7, "unverified": 11}}
    assert honoured["outcomes"]["guard_verdicts"] == {"chatter": 7} and honoured["outcomes"]["filtering"] == "verify"
    assert {v["instruction"] for v in views_h} == {scripted_instruction(i) for i in range(0, 23, 2)}
    report = (tmp_path / "out-True" / "report.md").read_text(encoding="utf-8")
    assert honoured["report"].endswith("report.md") and "| rejected: unverified | 11 |" in report


def _counts(summary: dict) -> dict:
    return {k: summary["outcomes"][k] for k in ("accepted", "rejected", "by_reason")}


@pytest.mark.slow
def test_the_filtering_policy_is_chosen_per_run_and_rejudges_the_cache_without_a_call(tmp_path):
    """One cache judged under each policy in turn: 'none' keeps what only a guard rejects and still
    counts the guards' verdicts; back to 'guards', the same answers are rejected again; no call is
    repeated. The reasoning before an answer is stored in the record, never in the instruction."""
    import pyarrow.parquet as pq

    from dualview_core.config import SynthesisConfig
    from tasks.synthesis.driver import run_synthesis

    seeds, kinds = thirty_seeds(tmp_path)
    started: list = []
    writer = Writer(kinds, honours_prefill=True)  # chatter inside the tags: parseable, and a guard rejects it
    out, runs = tmp_path / "out", {}
    try:
        url = start_writer(writer, started)
        for policy in ("guards", "none", "guards"):
            cfg = SynthesisConfig(engine="openai", filtering=policy, shard_rows=8,
                                  openai=OpenAIEngineConfig(base_url=url, model="scripted", concurrency=4))
            runs.setdefault(policy, []).append(run_synthesis(seeds, str(out), cfg, progress=lambda m: None))
            if policy == "none":
                accepted = pq.read_table(out / "dual_views.parquet").column("instruction").to_pylist()
    finally:
        stop_serving(started)
    assert writer.calls == 30  # the first run's; the others re-judge the cache
    guarded, waived = runs["guards"][0], runs["none"][0]
    assert _counts(guarded) == {"accepted": 23, "rejected": 7, "by_reason": {"chatter": 7}}
    assert _counts(waived) == {"accepted": 30, "rejected": 0, "by_reason": {}} and waived["cost"]["engine_rows"] == 0
    assert waived["outcomes"]["guard_verdicts"] == guarded["outcomes"]["guard_verdicts"] == {"chatter": 7}
    assert sum(CHATTER in a for a in accepted) == 7
    assert _counts(runs["guards"][1]) == _counts(guarded) and pq.read_table(out / "dual_views.parquet").num_rows == 23
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "filtering `guards`" in report and "| chatter | 7 |" in report and "Reply length in tokens over 30" in report


@pytest.mark.slow
def test_reasoning_before_the_answer_is_stored_in_the_record(tmp_path):
    import pyarrow.parquet as pq

    from dualview_core.config import SynthesisConfig
    from dualview_core.config.synthesis import prompt_sampling
    from tasks.synthesis.driver import run_synthesis

    seeds, kinds = thirty_seeds(tmp_path)
    started: list = []
    writer = Writer({q: (i, "think") for q, (i, _) in kinds.items()}, honours_prefill=False)
    try:
        cfg = SynthesisConfig(engine="openai", prompt="paper", sampling=prompt_sampling("paper"), filtering="none",
                              limit=4, shard_rows=4, openai=OpenAIEngineConfig(base_url=start_writer(writer, started),
                                                                                model="scripted"))
        summary = run_synthesis(seeds, str(out := tmp_path / "out"), cfg, progress=lambda m: None)
    finally:
        stop_serving(started)
    assert summary["prompt"] == "paper" and summary["filtering"] == "none" and summary["dual_views"] == 4
    records = pq.read_table(out / "records").to_pylist()
    assert {r["reasoning"] for r in records} == {"<think>A is about kits, B about numbers.</think>\nReasoning done."}
    assert {v["instruction"] for v in pq.read_table(out / "dual_views.parquet").to_pylist()} == {
        scripted_instruction(i) for i in range(4)}


@pytest.mark.slow
def test_an_old_format_cache_is_reused_with_no_new_calls(tmp_path):
    """Shards written under SynthesisRecord/1 (no seed columns) still answer their keys."""
    import pyarrow.parquet as pq

    from dualview_core.config import SynthesisConfig
    from dualview_core.contracts import SYNTHESIS_RECORD_V2_COLUMNS, SYNTHESIS_RECORD_V3_COLUMNS
    from tasks.synthesis.driver import run_synthesis

    seeds, kinds = thirty_seeds(tmp_path)
    kinds = {q: (i, "chatter" if i % 2 else "clean") for q, (i, _) in kinds.items()}
    started: list = []
    writer = Writer(kinds, honours_prefill=False)
    try:
        cfg = SynthesisConfig(engine="openai", limit=6, shard_rows=3,
                              openai=OpenAIEngineConfig(base_url=start_writer(writer, started), model="scripted"))
        out = tmp_path / "out"
        first = run_synthesis(seeds, str(out), cfg, progress=lambda m: None)
        for shard in (out / "records").glob("part-*.parquet"):  # rewrite the cache as version 1 wrote it
            table = pq.read_table(shard).drop_columns(list(SYNTHESIS_RECORD_V2_COLUMNS + SYNTHESIS_RECORD_V3_COLUMNS))
            pq.write_table(table.replace_schema_metadata({"contract": "SynthesisRecord/1"}), shard)
        assert "query_id" not in pq.read_table(next((out / "records").glob("part-*.parquet"))).column_names
        calls = writer.calls
        again = run_synthesis(seeds, str(out), cfg, progress=lambda m: None)
    finally:
        stop_serving(started)
    assert calls == 6 and writer.calls == 6 and again["plan"]["cached"] == 6 and again["cost"]["engine_rows"] == 0
    assert again["outcomes"] == first["outcomes"]
    rejections = pq.read_table(out / "rejections.parquet").to_pylist()
    assert len(rejections) == 3 and all(r["query_id"] and r["query"] and r["original_instruction"] for r in rejections)
    assert pq.read_table(out / "dual_views.parquet").num_rows == first["dual_views"] == 3


class Tally:
    """Two endpoints' view of the traffic: which rows each answered, and the peak in flight over both.

    Every request is held until `hold_until` requests are in flight at once over both endpoints; from
    then on none is. One actor's gate admits `concurrency` requests, so with hold_until above it the
    first answer waits for the second actor's requests: the two overlap by construction, however slowly
    the second actor starts. `patience_s` only turns a run where that never happens into a failure
    (`reached` stays False; holding stops for good) instead of a hang."""

    def __init__(self, hold_until: int, patience_s: float = 60.0):
        self.lock, self.in_flight, self.peak = threading.Lock(), 0, 0
        self.rows: list[list[str]] = [[], []]
        self.hold_until, self.patience_s = hold_until, patience_s
        self.reached = self.holding_over = False

    def handler(self, endpoint: int):
        async def handle(request: web.Request) -> web.Response:
            body = await request.json()
            with self.lock:
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                self.rows[endpoint].append(body["messages"][0]["content"])
                if self.in_flight >= self.hold_until:
                    self.reached = self.holding_over = True
            deadline = time.monotonic() + self.patience_s
            while not self.holding_over:
                if time.monotonic() > deadline:
                    self.holding_over = True  # gave up: the test fails on `reached`, without a hang
                await asyncio.sleep(0.01)  # the other endpoint's loop may be the one that ends the hold
            with self.lock:
                self.in_flight -= 1
            return web.json_response({"choices": [{"message": {"content": "ok"}}], "usage": {}})
        return handle


def test_two_actors_and_two_endpoints_answer_every_row_exactly_once():
    """200 rows through the engine's Ray Data stage on 2 actors (4 in flight each) and 2 endpoints."""
    import ray

    from dualview_core.config import SynthesisConfig
    from tasks.synthesis.engines import make_engine
    from tasks.synthesis.openai_client import endpoint_index
    from tasks.synthesis.ray_runtime import ensure_ray

    tally, started = Tally(hold_until=5), []  # one actor's gate admits 4
    try:
        urls = (serve(tally.handler(0), started), serve(tally.handler(1), started))
        cfg = SynthesisConfig(engine="openai", openai=OpenAIEngineConfig(base_urls=urls, model="m", concurrency=4, actors=2))
        rows = [{"cache_key": f"key-{i}", "messages": [{"role": "user", "content": f"key-{i}"}]} for i in range(200)]
        ensure_ray(cfg.ray_address)
        batches = make_engine(cfg).transform(ray.data.from_items(rows)).iter_batches(batch_size=64, batch_format="pyarrow")
        out = [r for batch in batches for r in batch.to_pylist()]
    finally:
        stop_serving(started)
    keys = [r["cache_key"] for r in out]
    assert sorted(keys) == sorted(r["cache_key"] for r in rows)  # every row once, none twice
    assert all(r["error"] is None and r["raw_response"] == "ok" and r["attempts"] == 1 for r in out)
    for endpoint in (0, 1):  # each endpoint answered exactly the rows its key picks, each once
        assert sorted(tally.rows[endpoint]) == sorted(k for k in keys if endpoint_index(k, 1, 2) == endpoint)
        assert tally.rows[endpoint]
    # the first answer waited until a second actor's request arrived beside the first actor's 4, and
    # never were more in flight than two gates of 4 admit
    assert tally.reached, "never more than 4 requests in flight: the second actor sent none beside the first"
    assert 4 < tally.peak <= 8


class FlakyVerifier(Writer):
    """The Writer, but its verification requests for the seeds in `failing` answer 503 the first
    `failures` times each (`failures` None: always)."""

    def __init__(self, kinds, failing: set[int], failures: int | None):
        super().__init__(kinds, honours_prefill=True)
        self.failing, self.failures, self.failed = failing, failures, Counter()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        i, _ = self.kinds[user.split("\n", 1)[0].removeprefix("QUERY: ")]
        verification = user.split("\n")[1].startswith("INSTRUCTION:")
        if verification and i in self.failing and (self.failures is None or self.failed[i] < self.failures):
            self.failed[i] += 1
            self.calls += 1
            return web.Response(status=503, text="overloaded")
        self.calls += 1
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": self.reply(body)}}],
                                  "usage": {"prompt_tokens": 700, "completion_tokens": 20}})


@pytest.mark.slow
def test_a_verdict_that_failed_is_asked_again_and_one_given_up_on_leaves_the_run_unchanged(tmp_path):
    from dualview_core.config import SamplingConfig, SynthesisConfig
    from tasks.synthesis.driver import UNCHANGED, run_synthesis

    seeds, kinds = thirty_seeds(tmp_path)
    started: list = []

    def run(out, cfg) -> tuple[dict, list[str]]:
        lines: list[str] = []
        return run_synthesis(seeds, str(out), cfg, progress=lines.append), lines

    try:
        # three verdicts fail once; three failed runs allowed: the next run asks them again, then all is final
        flaky = FlakyVerifier(kinds, failing={0, 2, 4}, failures=1)
        cfg = SynthesisConfig(engine="openai", filtering="verify", shard_rows=8, max_error_runs=3, openai=OpenAIEngineConfig(
            base_url=serve(flaky.handle, started), model="scripted", concurrency=4, max_attempts=1))
        out = tmp_path / "flaky"
        first, _ = run(out, cfg)
        assert first["verify_retry"] == 3 and first["cost"]["verify_rows"] == 23
        calls = flaky.calls
        second, lines = run(out, cfg)
        assert UNCHANGED not in lines and flaky.calls - calls == 3 and second["cost"]["verify_rows"] == 3
        assert second["verify_retry"] == 0 and second["outcomes"]["by_reason"]["unverified"] == 11  # the odd seeds
        calls = flaky.calls
        third, lines = run(out, cfg)
        assert UNCHANGED in lines and flaky.calls == calls and third["outcomes"] == second["outcomes"]
        # a new verification sampling is a new verdict for every accepted row
        resampled = cfg.model_copy(update={"verify_sampling": SamplingConfig(max_tokens=40, prefill="<verdict>",
                                                                             stop=("</verdict>",))})
        fourth, lines = run(out, resampled)
        assert UNCHANGED not in lines and fourth["cost"]["verify_rows"] == 23

        # a verdict that always fails, with one failed run allowed: given up on, and the run is unchanged after
        broken = FlakyVerifier(kinds, failing={0}, failures=None)
        cfg = cfg.model_copy(update={"max_error_runs": 1, "openai": cfg.openai.model_copy(
            update={"base_url": serve(broken.handle, started)})})
        out = tmp_path / "broken"
        first, _ = run(out, cfg)
        assert first["verify_retry"] == 0 and first["outcomes"]["by_reason"]["unverified"] == 12  # 11 + the broken one
        calls = broken.calls
        _, lines = run(out, cfg)
        assert UNCHANGED in lines and broken.calls == calls
    finally:
        stop_serving(started)


class RateLimited(Script):
    """Refuses with 429 and a Retry-After for `window_s` after its first request, then answers."""

    def __init__(self, window_s: float, header: str):
        super().__init__([])
        self.window_s, self.header, self.first = window_s, header, None

    async def _answer(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        self.first = self.first or now
        if now - self.first < self.window_s:
            await request.read()
            self.seen.append({"refused": now})
            return web.json_response({"error": "rate limited"}, status=429, headers={"Retry-After": self.header})
        return await super()._answer(request)


def test_a_rate_limited_run_waits_as_told_and_every_row_is_answered():
    started: list = []
    try:
        script = RateLimited(1.0, "1")
        url = serve(script.handle, started)
        t0 = time.monotonic()
        results = complete(url, rows=6, max_attempts=3)  # backoff 0.01 s: alone it would spend 3 tries in ~0.05 s
        assert [r["error"] for r in results] == [None] * 6
        assert {r["attempts"] for r in results} == {2} and time.monotonic() - t0 >= 1.0
    finally:
        stop_serving(started)


def test_retry_after_as_an_http_date_and_a_wait_past_the_budget():
    import email.utils

    from tasks.synthesis.openai_client import retry_after

    assert 8.9 < retry_after(email.utils.formatdate(time.time() + 10, usegmt=True)) <= 10.0  # whole seconds
    started: list = []
    try:
        url = serve(RateLimited(60.0, "30").handle, started)
        t0 = time.monotonic()
        [result] = complete(url, max_attempts=5, retry_budget_s=2.0)
        assert time.monotonic() - t0 < 2.0 and result["attempts"] == 1
        assert result["error"].startswith("HTTP 429") and "retry budget" in result["error"]
    finally:
        stop_serving(started)


class EchoesCredentials(Script):
    """Refuses every request with a body that quotes the request's Authorization header back."""

    async def _answer(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"error": f"invalid credentials: {request.headers.get('Authorization')}",
                                  "api_key": request.headers.get("Authorization", "").removeprefix("Bearer ")},
                                 status=401)


def test_an_api_key_a_server_echoes_in_an_error_body_is_redacted(monkeypatch):
    monkeypatch.setenv("DV_TEST_KEY", "plainsecretvalue42")  # not shaped like a key: only the configured value finds it
    started: list = []
    try:
        url = serve(EchoesCredentials([]).handle, started)
        [result] = complete(url, api_key_env="DV_TEST_KEY")
        assert result["error"].startswith("RuntimeError: HTTP 401") and "[redacted]" in result["error"]
        assert "plainsecretvalue42" not in json.dumps(result)
    finally:
        stop_serving(started)
