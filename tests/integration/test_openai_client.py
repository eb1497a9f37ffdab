"""The OpenAI-compatible client against a scripted local HTTP server: retries, timeouts, no key leaks."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web

from dualview_core.config import OpenAIEngineConfig, SamplingConfig
from tasks.openai_client import ChatClient
from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration
SECRET = "sk-test-do-not-leak-1234"


class Script:
    """Answers in order: an int is an HTTP status, a float a delay in seconds before answering 200."""

    def __init__(self, steps):
        self.steps, self.seen = list(steps), []
        self.in_flight = self.peak = 0

    async def handle(self, request: web.Request) -> web.Response:
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
        return web.json_response({"choices": [{"message": {"content": "Only X.</new_instruction>"}}],
                                  "usage": {"prompt_tokens": 11, "completion_tokens": 3}})


@pytest.fixture
def server():
    def start(steps):
        script, port = Script(steps), free_port()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", script.handle)
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        threading.Thread(target=loop.run_forever, daemon=True).start()
        started.append((loop, runner))
        return script, f"http://127.0.0.1:{port}/v1"

    started: list = []
    yield start
    for loop, runner in started:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)


def complete(base_url: str, rows: int = 1, **cfg) -> list[dict]:
    client = ChatClient(OpenAIEngineConfig(base_url=base_url, model="m", backoff_s=0.01, **cfg),
                        SamplingConfig(max_tokens=8, prefill="<answer><new_instruction>"))
    return asyncio.run(client.complete_all([{"cache_key": f"k{i}", "messages": [{"role": "user", "content": "hi"}]} for i in range(rows)]))


def test_success_carries_prefill_usage_and_continuation_flags(server):
    script, url = server([200])
    [result] = complete(url)
    assert result["raw_response"] == "<answer><new_instruction>Only X.</new_instruction>"
    assert (result["prompt_tokens"], result["completion_tokens"], result["attempts"], result["error"]) == (11, 3, 1, None)
    body = script.seen[0]["body"]
    assert body["messages"][-1] == {"role": "assistant", "content": "<answer><new_instruction>"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


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
