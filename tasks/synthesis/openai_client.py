"""An OpenAI-compatible chat client for synthesis: pooled, bounded, spread over endpoints, retried, no leaks.

Owns how one row `{cache_key, messages}` becomes one chat-completions request and comes back as a
result row (`contracts.ENGINE_RESULT`); it must not know what the prompt
says or how the answer is parsed.

- Client: aiohttp, one `ClientSession` per actor (per event loop), its `TCPConnector` limited to
  `concurrency` connections, and one semaphore holding exactly `concurrency` requests in flight
  across every batch on the actor. aiohttp rather than httpx, for throughput: the CPU that httpx's
  client spends per request caps one event loop far below what a server answering 64 requests at a
  time can take, while aiohttp's keeps up with it (benchmarks/synthesis_overhead.py measures both;
  the figures are in benchmarks/README.md).
- Endpoints (`base_urls`, else `base_url`): a row's first attempt goes to endpoint
  crc32(cache_key) mod n, so a re-run asks the same one; each retry moves to the next endpoint, so a
  failing endpoint's rows are answered by the others under the same retry rules.
  With 2 endpoints, attempts of a key whose crc32 is odd go to 1, 0, 1, 0, ...
- Retries, with exponential backoff and jitter, on timeouts, connection errors, 408/409/429 and 5xx;
  other 4xx answers are final. A 429 or 503 that says when to come back (`Retry-After`, in seconds
  or as an HTTP date) is retried no sooner than that, while the row's `retry_budget_s` lasts; a wait
  past the budget ends the row with that answer, for the next run to retry. A transport failure is recorded under a stable name (ReadTimeout,
  ConnectTimeout, ConnectError, else the exception's type), an answer as `HTTP <status>`.
- Timeout: `timeout_s` bounds each request as a whole (connect, send, wait, read).
- Prefill: sent as a final assistant message with vLLM's `continue_final_message` and `echo`: a
  server that honours them replies prefill + continuation, one that ignores them replies from
  scratch, and the raw response is the reply exactly as sent (the prefill is never prepended here,
  so text outside a restated answer block stays outside it).
- The API key is read from the environment variable the config names, sent only in the
  Authorization header, and never put in errors, logs or outputs: exceptions are recorded by type
  name alone and re-raised `from None`, so no request object (which carries the headers) rides along,
  and an answer's body is kept only with the key and anything credential-shaped redacted.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
import zlib

import aiohttp
import orjson
import pyarrow as pa

from dualview_core.config import OpenAIEngineConfig, SamplingConfig
from dualview_core.config.base import redact
from dualview_core.contracts import ENGINE_RESULT
from dualview_core.method.prompting import with_prefill

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}
JSON = {"Content-Type": "application/json"}
ERROR_BODY_CHARS = 200  # of a final 4xx answer's body, kept in the error (it says why: context, model)


class RetryableError(Exception):
    def __init__(self, message: str, after_s: float | None = None):
        super().__init__(message)
        self.after_s = after_s  # the server's Retry-After, in seconds from now


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delay-seconds or an HTTP date; None if absent or unreadable.

        >>> retry_after("3"), retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0), retry_after("soon")
        (3.0, 10.0, None)
    """
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def endpoint_index(cache_key: str, attempt: int, endpoints: int) -> int:
    """Which endpoint serves `attempt` (1-based) of a row: the key's crc32 picks the first, each retry
    the next. crc32 (not `hash`) so every process and every run agrees."""
    return (zlib.crc32(cache_key.encode()) + attempt - 1) % endpoints


def transport_error(exc: BaseException) -> str:
    """A stable name for a failure to get an answer at all (the error text of a result row)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # a subclass of the read timeout: test it first
        return "ConnectTimeout"
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        return "ReadTimeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "ConnectError"
    return type(exc).__name__


class ChatClient:
    def __init__(self, cfg: OpenAIEngineConfig, sampling: SamplingConfig):
        self.cfg, self.sampling = cfg, sampling
        key = os.environ.get(cfg.api_key_env)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._secrets = (key,) if key else ()
        self._urls = [f"{root}/chat/completions" for root in cfg.endpoints()]
        self._session: aiohttp.ClientSession | None = None
        self._gate: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _body(self, messages: list[dict]) -> dict:
        body = {"model": self.cfg.model, "messages": messages, **self.sampling.engine_params()}
        if self.sampling.prefill:  # vLLM-style continuation of the final assistant message, echoed back
            body["messages"] = with_prefill(messages, self.sampling)
            body |= {"add_generation_prompt": False, "continue_final_message": True, "echo": True}
        return body

    def _open(self) -> None:
        """The session and gate of the running loop, created inside it (aiohttp and asyncio bind to it)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        # a first call, or a new loop (a session dies with the loop that made it)
        self._loop, self._gate = loop, asyncio.Semaphore(self.cfg.concurrency)
        self._session = aiohttp.ClientSession(
            headers=self._headers, connector=aiohttp.TCPConnector(limit=self.cfg.concurrency),
            timeout=aiohttp.ClientTimeout(total=self.cfg.timeout_s))

    async def _once(self, url: str, body: bytes) -> dict:
        try:
            async with self._session.post(url, data=body, headers=JSON) as response:
                if response.status in RETRYABLE_STATUS:
                    after = retry_after(response.headers.get("Retry-After")) if response.status in (429, 503) else None
                    raise RetryableError(f"HTTP {response.status}", after)
                if response.status >= 400:
                    body = redact(await response.text(), self._secrets)[:ERROR_BODY_CHARS]  # redact, then cut
                    raise RuntimeError(f"HTTP {response.status}: {body}")
                return orjson.loads(await response.read())  # whatever the content type says
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RetryableError(transport_error(exc)) from None

    async def complete(self, cache_key: str, messages: list[dict]) -> dict:
        """One row's result: answered, or failed with the last error after the retries allowed."""
        self._open()
        body = orjson.dumps(self._body(messages))  # once for every attempt; orjson: far less CPU than json per body
        start, error, attempts, waited = time.perf_counter(), None, 0, 0.0
        for attempt in range(1, self.cfg.max_attempts + 1):
            attempts = attempt
            url = self._urls[endpoint_index(cache_key, attempt, len(self._urls))]
            try:
                async with self._gate:
                    data = await self._once(url, body)
                usage = data.get("usage") or {}
                return {"cache_key": cache_key, "raw_response": data["choices"][0]["message"]["content"] or "",
                        "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
                        "latency_s": time.perf_counter() - start, "attempts": attempt, "error": None}
            except RetryableError as exc:
                error = str(exc)
                if attempt == self.cfg.max_attempts:
                    break
                wait = self.cfg.backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 4)
                if exc.after_s is not None:  # the server said when: never sooner
                    wait = max(wait, exc.after_s)
                if waited + wait > self.cfg.retry_budget_s:  # the budget counts waits, not queueing or requests
                    error += (f" (the server asks to wait {exc.after_s:.0f} s" if exc.after_s is not None
                              else f" (the next try would wait {wait:.0f} s") + ", past the row's retry budget)"
                    break
                waited += wait
                await asyncio.sleep(wait)
            except (RuntimeError, KeyError, IndexError, TypeError, ValueError) as exc:  # a final answer (orjson's error is a ValueError)
                error = f"{type(exc).__name__}: {exc}"
                break
        return {"cache_key": cache_key, "raw_response": None, "prompt_tokens": None, "completion_tokens": None,
                "latency_s": time.perf_counter() - start, "attempts": attempts, "error": error}

    async def complete_all(self, rows: list[dict]) -> list[dict]:
        """Complete rows on the session and concurrency gate shared by every call on this event loop."""
        return await asyncio.gather(*(self.complete(r["cache_key"], r["messages"]) for r in rows))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session, self._loop = None, None


class OpenAIStage:
    """The Ray Data stage: a callable class (one client, so one connection pool, per actor) with an
    async `__call__`, so Ray Data keeps several batches in flight on the actor and the shared gate
    keeps the actor at exactly `concurrency` requests, with no gap between batches."""

    def __init__(self, cfg: OpenAIEngineConfig, sampling: SamplingConfig, carry: list[str] | None = None):
        self.client, self.carry = ChatClient(cfg, sampling), carry or []

    async def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.select(["cache_key", "messages"]).to_pylist()
        out = pa.Table.from_pylist(await self.client.complete_all(rows), schema=ENGINE_RESULT)  # in input order
        for name in self.carry:
            out = out.append_column(name, batch[name])
        return out
