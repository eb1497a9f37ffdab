"""Fixtures for integration tests: real local services, each started as a process and stopped by its
pid. The helpers they use (ports, waits, endpoints, killing a session) are in tests/helpers/services.py;
importing it here sets moto's throwaway AWS credentials as defaults for the whole session, before any
test starts a local Ray. The bundled-sample `sample` fixture is in tests/conftest.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.services import CHROMIUM_ARGS, THROWAWAY_AWS, free_port, wait_for_port, wait_healthy


@pytest.fixture(scope="session")
def s3_log(tmp_path_factory) -> Path:
    """The moto server's log: one line per request it served (see `tests.helpers.services.s3_requests`)."""
    return Path(tmp_path_factory.mktemp("moto")) / "moto.log"


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
    from tasks.synthesis.llm_models import resolve_llm

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
        wait_healthy(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
