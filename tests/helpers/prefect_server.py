"""A Prefect server and worker as the orchestration and rehearsal tests run them: processes started
in the repository with their own session (stopped by process group), a wait for the server's health,
snippets run against its API in a child process, and a deployment triggered as the UI's custom run
does it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.services import wait_for_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def start(cmd: list[str], log: Path, env: dict, port: int | None = None, timeout: float = 120) -> subprocess.Popen:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
    if port:
        wait_for_port(port, proc, timeout)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_prefect_ready(env: dict, timeout: float = 120) -> None:
    """Wait until the Prefect server at env's PREFECT_API_URL answers its /health with 200."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(env["PREFECT_API_URL"] + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError("Prefect server not healthy")


def prefect_api(env: dict, code: str) -> str:
    """Run a snippet against the Prefect API in a child process (its settings come from env); the last
    line it printed."""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def run_deployment(env: dict, name: str, parameters: dict, job_variables: dict | None = None) -> dict:
    """Trigger a deployment with custom parameters (and job variables) as the UI's custom run does and
    wait for it: its flow run's id, its final state, its logs, and the seconds from its start to its end."""
    return json.loads(prefect_api(env, f"""
import json, time
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.deployments import run_deployment
from prefect.client.schemas.sorting import LogSort
run = run_deployment({name!r}, parameters=json.loads({json.dumps(parameters)!r}),
                     job_variables=json.loads({json.dumps(job_variables or {})!r}), timeout=2400, poll_interval=3)
# the flow-run process ships its logs in the background: its state can be final before its last lines
# are stored, so wait for the run's closing line
deadline = time.monotonic() + 120
with get_client(sync_client=True) as c:
    while True:
        logs, page = [], None
        while page is None or len(page) == 200:  # the API's page size
            page = c.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])), limit=200,
                               offset=len(logs), sort=LogSort.TIMESTAMP_ASC)
            logs += page
        if any(l.task_run_id is None and l.message.startswith("Finished in state") for l in logs) or time.monotonic() > deadline:
            break
        time.sleep(1)
    run = c.read_flow_run(run.id)
took = (run.end_time - run.start_time).total_seconds() if run.start_time and run.end_time else None
print(json.dumps({{"id": str(run.id), "state": run.state.type.value, "message": run.state.message, "logs": [l.message for l in logs],
                  "seconds": took}}))
"""))


def flow_run_artifacts(env: dict, flow_run_id: str) -> dict[str, dict]:
    """A flow run's artifacts as its Artifacts tab lists them, read through the Prefect API: key ->
    {type, data, description} (a table's data decoded from the JSON Prefect stores)."""
    return json.loads(prefect_api(env, f"""
import json
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
with get_client(sync_client=True) as c:
    found = c.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[{flow_run_id!r}])))
print(json.dumps({{a.key: {{"type": a.type, "data": json.loads(a.data) if a.type == "table" else a.data,
                          "description": a.description}} for a in found}}))
"""))
