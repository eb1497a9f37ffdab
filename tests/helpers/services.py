"""Starting, finding and stopping local services for integration tests: free ports, an OpenAI-shaped
endpoint on its own event loop, waits for a port or a health URL, killing a whole process session,
and moto's request log. Importing this module sets moto's throwaway AWS credentials as defaults in
the environment (see THROWAWAY_AWS)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

# moto's throwaway credentials, set before any test starts a local Ray: Ray workers inherit the
# environment of the process that started Ray, and they read and write S3 (a run's first pass and
# the stage after its engine), as a user's workers do with the credentials of their own environment.
THROWAWAY_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
for _name, _value in THROWAWAY_AWS.items():
    os.environ.setdefault(_name, _value)


def kill_session(sid: int, timeout: float = 30) -> None:
    """SIGKILL every process of session `sid` (a run started with `start_new_session=True`): its
    driver, Ray's processes and Ray's workers, which sit in process groups of their own, so a
    `killpg` of the driver's group leaves them to finish a task after the driver is gone."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == sid:
                    procs.append(p)
            except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
                pass
        if not procs:
            return
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=5)
    raise TimeoutError(f"processes of session {sid} still alive after {timeout}s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(handler, started: list) -> str:
    """An OpenAI-shaped chat endpoint on 127.0.0.1 answering with `handler` (an aiohttp handler), on its
    own event loop in a thread; its (loop, runner) is appended to `started` for `stop_serving`."""
    import asyncio
    import threading

    from aiohttp import web

    port = free_port()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    threading.Thread(target=loop.run_forever, daemon=True).start()
    started.append((loop, runner))
    return f"http://127.0.0.1:{port}/v1"


def stop_serving(started: list) -> None:
    """Stop every endpoint `serve` started into `started`."""
    import asyncio

    for loop, runner in started:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)


def running_with(arg: str) -> bool:
    """Whether any process has `arg` as one of its command-line arguments (Linux /proc)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if arg.encode() in cmdline.read_bytes().split(b"\0"):
                return True
        except OSError:  # it ended while we looked
            continue
    return False


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited early with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def wait_healthy(port: int, timeout: float = 120) -> None:
    """Wait until a vLLM server on 127.0.0.1:`port` answers its /health with 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError("vLLM server never became healthy")


def s3_requests(log: Path) -> int:
    """Requests the moto server has answered so far, counted from its access log."""
    return sum(1 for line in log.read_text(errors="replace").splitlines() if '" ' in line and "HTTP/1." in line)


# As root, headless, and without the background traffic a closed network refuses (Debian's Chromium).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
