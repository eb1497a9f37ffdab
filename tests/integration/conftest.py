"""Real local services for integration tests. Each is started as a process and stopped by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def s3_log(tmp_path_factory) -> Path:
    """The moto server's log: one line per request it served (see `s3_requests`)."""
    return Path(tmp_path_factory.mktemp("moto")) / "moto.log"


def s3_requests(log: Path) -> int:
    """Requests the moto server has answered so far, counted from its access log."""
    return sum(1 for line in log.read_text(errors="replace").splitlines() if '" ' in line and "HTTP/1." in line)


@pytest.fixture(scope="session")
def s3_server(s3_log):
    """moto's S3-compatible server on 127.0.0.1, with throwaway credentials in the environment."""
    port = free_port()
    log = s3_log
    moto = Path(sys.executable).parent / "moto_server"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    saved = {k: os.environ.get(k) for k in THROWAWAY_AWS}
    os.environ.update(THROWAWAY_AWS)
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture
def s3_options(s3_server) -> dict:
    # No region in client_kwargs: against a local server it makes s3fs's mkdir fail.
    return {"client_kwargs": {"endpoint_url": s3_server}}


def fixture_instruction(seed: dict) -> str:
    """A test fixture standing in for synthesis: ask for the target's topic, exclude the old positive's."""
    return (f"Only passages like '{seed['instruction_negatives'][0]['title']}' are relevant; "
            f"ones like '{seed['positives'][0]['title']}' are not.")


@pytest.fixture(scope="session")
def sample(tmp_path_factory) -> tuple[str, str]:
    """(seeds, dual views) for training tests: the bundled seeds and one fixture dual view per seed."""
    import pyarrow as pa

    from dualview_core import samples
    from dualview_core.contracts import DUAL_VIEW_ROW
    from dualview_core.dual_view import make_dual_view
    from dualview_core.io import write_table
    from dualview_core.loading import read_seeds

    seeds = read_seeds(samples.seeds_path()).seeds.to_pylist()
    views = [make_dual_view(s, fixture_instruction(s), prompt_version="fixture", model_id="hand-written")
             for s in seeds if s["has_instruction"] and s["instruction_negatives"]]
    path = str(tmp_path_factory.mktemp("views") / "dual_views.parquet")
    write_table(path, pa.Table.from_pylist(views, schema=DUAL_VIEW_ROW), DUAL_VIEW_ROW)
    return samples.seeds_path(), path


# As root, headless, and without the background traffic a closed network refuses (Debian's Chromium).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's package, which .ci/run installs) driven by Playwright. Without it,
    the browser tests skip with that reason on a developer's machine and fail in CI."""
    import shutil

    chromium = shutil.which("chromium")
    if chromium is None:
        message = "headless browser tests need Debian's chromium (apt-get install chromium)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """vLLM's OpenAI-compatible server on 127.0.0.1, serving the packaged SmolLM2; started once for
    the session (the synthesis tests and the orchestration story share it)."""
    from tasks.llm_models import resolve_llm

    model = resolve_llm("smollm2", Path(__file__).resolve().parents[2] / ".cache" / "models")
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", "smollm2",
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048", "--host", "127.0.0.1", "--port", str(port)]
    env = os.environ | {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}  # every core for the engine: ~1.4x its speed here
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        wait_for_port(port, proc, timeout=300)
        _wait_healthy(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def _wait_healthy(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError("vLLM server never became healthy")
