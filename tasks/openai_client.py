"""An OpenAI-compatible chat client for synthesis: bounded concurrency, timeouts, retries, no leaks.

Retries (with exponential backoff and jitter) on timeouts, connection errors, 429 and 5xx; other
4xx answers are final. A prefill is sent as a final assistant message with vLLM's
`continue_final_message` and `echo`: a server that honours them replies prefill + continuation, one
that ignores them replies from scratch, and the raw response is the reply exactly as sent (the
prefill is never prepended here, so text outside a restated answer block stays outside it). The API key is read from the environment variable the config names, sent only
in the Authorization header, and never put in errors, logs or outputs.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import httpx
import pyarrow as pa

from dualview_core.config import OpenAIEngineConfig, SamplingConfig

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


class RetryableError(Exception):
    pass


class ChatClient:
    def __init__(self, cfg: OpenAIEngineConfig, sampling: SamplingConfig):
        self.cfg, self.sampling = cfg, sampling
        key = os.environ.get(cfg.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client_args = {"base_url": cfg.base_url.rstrip("/"), "headers": headers, "timeout": cfg.timeout_s}
        self._client: httpx.AsyncClient | None = None
        self._gate: asyncio.Semaphore | None = None

    def _body(self, messages: list[dict]) -> dict:
        body = {"model": self.cfg.model, "messages": messages, **self.sampling.engine_params()}
        if self.sampling.prefill:  # vLLM-style continuation of the final assistant message, echoed back
            body["messages"] = messages + [{"role": "assistant", "content": self.sampling.prefill}]
            body |= {"add_generation_prompt": False, "continue_final_message": True, "echo": True}
        return body

    async def _once(self, client: httpx.AsyncClient, body: dict) -> dict:
        try:
            response = await client.post("/chat/completions", json=body)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise RetryableError(type(exc).__name__) from None
        if response.status_code in RETRYABLE_STATUS:
            raise RetryableError(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        return response.json()

    async def complete(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, cache_key: str, messages: list[dict]) -> dict:
        body = self._body(messages)
        start, error, attempts = time.perf_counter(), None, 0
        for attempt in range(1, self.cfg.max_attempts + 1):
            attempts = attempt
            try:
                async with gate:
                    data = await self._once(client, body)
                usage = data.get("usage") or {}
                return {"cache_key": cache_key, "raw_response": data["choices"][0]["message"]["content"] or "",
                        "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
                        "latency_s": time.perf_counter() - start, "attempts": attempt, "error": None}
            except RetryableError as exc:
                error = str(exc)
                if attempt < self.cfg.max_attempts:
                    await asyncio.sleep(self.cfg.backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 4))
            except (RuntimeError, KeyError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"
                break
        return {"cache_key": cache_key, "raw_response": None, "prompt_tokens": None, "completion_tokens": None,
                "latency_s": time.perf_counter() - start, "attempts": attempts, "error": error}

    async def complete_all(self, rows: list[dict]) -> list[dict]:
        """Complete rows on a client and concurrency gate shared by every call on this event loop."""
        if self._client is None:  # created lazily, inside the loop that will use them
            self._gate = asyncio.Semaphore(self.cfg.concurrency)
            limits = httpx.Limits(max_connections=self.cfg.concurrency, max_keepalive_connections=self.cfg.concurrency)
            self._client = httpx.AsyncClient(limits=limits, **self._client_args)
        return await asyncio.gather(*(self.complete(self._client, self._gate, r["cache_key"], r["messages"]) for r in rows))

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class OpenAIStage:
    """The Ray Data stage: a callable class (one client per actor) with an async `__call__`, so Ray
    Data keeps several batches in flight on the actor and the shared gate keeps the endpoint at
    exactly `concurrency` requests, with no gap between batches."""

    def __init__(self, cfg: OpenAIEngineConfig, sampling: SamplingConfig):
        self.client = ChatClient(cfg, sampling)

    async def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.select(["cache_key", "messages"]).to_pylist()
        return pa.Table.from_pylist(await self.client.complete_all(rows), schema=RESULT_SCHEMA)


RESULT_SCHEMA = pa.schema([
    ("cache_key", pa.string()), ("raw_response", pa.string()), ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()), ("latency_s", pa.float64()), ("attempts", pa.int64()), ("error", pa.string()),
])
