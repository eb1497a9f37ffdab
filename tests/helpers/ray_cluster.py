"""A local multi-node Ray cluster for integration tests: one `ray start --block` process per node
(a head with the dashboard, its job API and a Ray Client server, and workers), each in its own
process group, so a test can kill one node's raylet and the fixture can stop exactly its own nodes.

Ray 2.60 rewrites a node IP of 127.0.0.1 to this host's own routable address
(`resolve_ip_for_localhost`); the nodes still talk only to this machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).parent / "ray")


@dataclass
class LocalCluster:
    gcs_port: int
    dashboard: str  # http://127.0.0.1:<port>: the job API and the state API
    client: str  # ray://127.0.0.1:<port>: the head's Ray Client server
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)  # custom resource name -> its `ray start`

    def node_ids(self) -> dict[str, str]:
        """Node name (its custom resource) -> Ray node id, for the nodes alive now."""
        names = {}
        for node in self.state("nodes"):
            if node.get("state") == "ALIVE":
                for name in self.nodes:
                    if name in node.get("resources_total", {}):
                        names[name] = node["node_id"]
        return names

    def state(self, what: str, **filters: str) -> list[dict]:
        query = "&".join(f"filter_keys={k}&filter_predicates=%3D&filter_values={v}" for k, v in filters.items())
        with urllib.request.urlopen(f"{self.dashboard}/api/v0/{what}?limit=10000&{query}", timeout=30) as r:
            return json.load(r)["data"]["result"]["result"]

    def kill_raylet(self, name: str) -> None:
        """SIGKILL the raylet of node `name`: the node and every worker on it die without warning."""
        raylets = [p for p in psutil.Process(self.nodes[name].pid).children(recursive=True) if p.name() == "raylet"]
        assert raylets, f"node {name} has no raylet"
        for raylet in raylets:
            raylet.kill()

    def stop(self) -> None:
        """SIGKILL every process of every node (a test cluster needs no graceful drain: it takes 30 s)."""
        procs = []
        for proc in self.nodes.values():
            try:
                procs += [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=30)
        for proc in self.nodes.values():
            proc.wait()


class NodeExited(RuntimeError):
    """A node's `ray start` ended while the cluster was starting; the message quotes its log's last lines."""


def start_cluster(workers: tuple[str, ...], log_dir: Path, cpus_per_node: float = 1, head_cpus: float = 0,
                  timeout: float = 180, attempts: int = 3) -> LocalCluster:
    """A head ('head' resource; no CPU by default, as infra/ray/raycluster.yaml's head) and one worker
    node per name, all on this machine. The nodes get this process's environment, with its
    interpreter's folder first on PATH (a job runs `dualview`).

    Ports are picked free below the kernel's ephemeral range (see `_port`), yet something can still
    bind one before Ray does; a start whose node exits is retried with fresh ports and a fresh temp dir
    up to `attempts` times, and each failed start's node logs stay in `log_dir/<attempt>/`."""
    failures = []
    for attempt in range(1, attempts + 1):
        logs = log_dir / str(attempt)
        logs.mkdir(parents=True, exist_ok=True)
        try:
            return _start_cluster(workers, logs, cpus_per_node, head_cpus, timeout)
        except NodeExited as e:
            failures.append(f"attempt {attempt}: {e}")
            print(f"local Ray cluster, attempt {attempt} of {attempts} failed: {e}", file=sys.stderr)
    raise NodeExited("\n".join(failures))


def _start_cluster(workers: tuple[str, ...], log_dir: Path, cpus_per_node: float, head_cpus: float,
                   timeout: float) -> LocalCluster:
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                        "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                        # the head waits this long for its dashboard (Ray's default, 60 s, is short on a loaded 2-core box)
                        "RAY_DASHBOARD_STARTUP_TIMEOUT_S": str(int(timeout))}
    taken: set[int] = set()  # ports handed out in this start: a random pick can repeat
    gcs, dash, client = _port(taken), _port(taken), _port(taken)
    cluster = LocalCluster(gcs, f"http://127.0.0.1:{dash}", f"ray://127.0.0.1:{client}")
    def common(cpus: float) -> list[str]:  # several nodes on one host: every per-node port its own
        ports = ("--node-manager-port", "--object-manager-port", "--metrics-export-port", "--runtime-env-agent-port",
                 "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port")
        return ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus), "--disable-usage-stats",
                *[arg for flag in ports for arg in (flag, str(_port(taken)))]]

    head = [RAY, "start", "--head", "--port", str(gcs), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
            "--include-dashboard=true", "--ray-client-server-port", str(client),
            "--temp-dir", tempfile.mkdtemp(prefix="dvray", dir="/tmp"), "--resources", json.dumps({"head": 1}),
            *common(head_cpus)]
    try:
        cluster.nodes["head"] = _start(head, env, log_dir / "head.log")
        _wait_joined(cluster, log_dir, timeout)
        for name in workers:  # one at a time: on 2 cores, nodes starting together time out
            cmd = [RAY, "start", "--address", f"127.0.0.1:{gcs}", "--resources", json.dumps({name: 1}), *common(cpus_per_node)]
            cluster.nodes[name] = _start(cmd, env, log_dir / f"{name}.log")
            _wait_joined(cluster, log_dir, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_joined(cluster: LocalCluster, log_dir: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(_alive(cluster)) < len(cluster.nodes):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {sorted(_alive(cluster))} of {sorted(cluster.nodes)} joined in {timeout}s")
        for name, proc in cluster.nodes.items():
            if proc.poll() is not None:
                raise NodeExited(f"node {name} exited with {proc.returncode}; the last lines of {log_dir}/{name}.log:\n"
                                 + _tail(log_dir / f"{name}.log"))
        time.sleep(0.5)


def _port(taken: set[int]) -> int:
    """A free port between Ray's worker ports (10002-19999) and the ephemeral range, which outgoing
    connections draw from: a port picked there can be taken by any client on this machine before the
    node binds it (a port from `bind(0)` is in that range)."""
    low = min(int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]), 32768)
    if low <= 21000:
        raise RuntimeError(f"the ephemeral port range starts at {low}: no room for the cluster's ports above Ray's worker ports")
    while True:
        port = random.randrange(20000, low)
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))  # every address: Ray binds the node IP too
            except OSError:
                continue
        taken.add(port)
        return port


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _alive(cluster: LocalCluster) -> dict[str, str]:
    try:
        return cluster.node_ids()
    except OSError:  # the dashboard is still starting its modules
        return {}


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
