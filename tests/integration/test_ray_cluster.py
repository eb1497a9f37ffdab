"""Synthesis on a local Ray cluster of three nodes (a head and two workers, separate `ray start`
processes), submitted as a Ray Job by the Prefect flow, outputs on moto S3, answers from the
session's vLLM server.

The head has no CPU, as on the cluster (infra/ray/raycluster.yaml): the job's driver runs there, and
so do the tasks that read its staged input. One run spreads its engine actors over the nodes; a
worker node's raylet is SIGKILLed while rows are still unanswered; the run completes, or a second
submission does, with every planned row recorded exactly once. A job that fails is a failed flow
run whose message quotes the job's last log lines.
"""

from __future__ import annotations

import threading
import time
import uuid

import pyarrow.parquet as pq
import pytest
import s3fs
from prefect.testing.utilities import prefect_test_harness

from dualview_core import sample
from dualview_core.config import DataSource, OpenAIEngineConfig, RayJobConfig, SynthesisConfig
from flows.synthesize import synthesize
from tasks.synthesis.driver import UNCHANGED, run_synthesis
from tests.helpers.services import s3_requests
from tests.helpers.ray_cluster import LocalCluster, start_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ENGINE_ACTOR = "MapWorker"  # Ray Data's actor class for a map_batches stage's actor pool


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="module")
def cluster(s3_server, tmp_path_factory):
    """Started after moto, so every node has its throwaway AWS credentials in the environment."""
    nodes = start_cluster(("worker_a", "worker_b"), tmp_path_factory.mktemp("ray-cluster"))
    try:
        yield nodes
    finally:
        nodes.stop()


def flow_logs(flow_run_id) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # the run's logs are shipped in the background: send what is queued
    logs, page = [], None
    with get_client(sync_client=True) as c:
        while page is None or len(page) == 200:  # the API's page size
            page = c.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200,
                               offset=len(logs), sort=LogSort.TIMESTAMP_ASC)
            logs += page
    return [log.message for log in logs]


class KillAWorkingNode(threading.Thread):
    """Watches the engine actors; once a shard is published and rows are still unanswered, SIGKILLs
    the raylet of a worker node that runs an engine actor. Records every node an actor ran on."""

    def __init__(self, cluster: LocalCluster, fs: s3fs.S3FileSystem, records: str):
        super().__init__(daemon=True)
        self.cluster, self.fs, self.records = cluster, fs, records
        self.nodes: set[str] = set()
        self.killed: str | None = None
        self.published_at_kill = -1
        self.error: Exception | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self._watch()
        except Exception as exc:
            self.error = exc

    def _watch(self) -> None:
        workers = {v: k for k, v in self.cluster.node_ids().items() if k != "head"}
        while not self.stop.is_set() and self.killed is None:
            actors = [a for a in self.cluster.state("actors", state="ALIVE") if ENGINE_ACTOR in a.get("class_name", "")]
            self.nodes |= {a["node_id"] for a in actors}
            shards = self.fs.glob(f"{self.records}/part-*.parquet")
            on_workers = [workers[a["node_id"]] for a in actors if a["node_id"] in workers]
            if shards and on_workers:
                self.fs.invalidate_cache()
                self.published_at_kill = sum(pq.read_metadata(self.fs.open(s)).num_rows for s in shards)
                self.killed = on_workers[0]
                self.cluster.kill_raylet(self.killed)
                return
            self.fs.invalidate_cache()
            time.sleep(0.2)


def record_keys(fs: s3fs.S3FileSystem, records: str) -> list[str]:
    fs.invalidate_cache()
    return [k for shard in sorted(fs.glob(f"{records}/part-*.parquet"))
            for k in pq.read_table(fs.open(shard), columns=["cache_key"]).column("cache_key").to_pylist()]


@pytest.fixture
def bucket(s3_options) -> tuple[s3fs.S3FileSystem, str, DataSource]:
    """A fresh bucket holding the bundled seeds; the flow reads them, and writes its output, there."""
    fs = s3fs.S3FileSystem(**s3_options)
    name = f"cluster-{uuid.uuid4().hex[:8]}"
    fs.mkdir(name)
    fs.put(sample.seeds_path(), f"{name}/seeds/seeds.jsonl")
    return fs, name, DataSource(path=f"s3://{name}/seeds/", storage_options=s3_options)


def test_a_ray_job_on_three_nodes_survives_a_killed_worker_node(harness, cluster, vllm_server, bucket, s3_log):
    fs, name, seeds = bucket
    out, total = f"s3://{name}/synthesis", 12
    config = SynthesisConfig(
        engine="openai", limit=total, shard_rows=2,
        # three actors, one request each in flight per batch (a few batches each): spread over the nodes
        openai=OpenAIEngineConfig(base_url=f"{vllm_server}/v1", model="smollm2", concurrency=1, actors=3),
        ray_job=RayJobConfig(address=cluster.dashboard, poll_s=0.5),
    )
    killer = KillAWorkingNode(cluster, fs, f"{name}/synthesis/records")
    killer.start()
    state = synthesize(seeds=seeds, out=out, config=config, return_state=True)
    killer.stop.set()
    killer.join(timeout=30)
    assert killer.error is None, f"the watcher failed: {killer.error!r}"
    assert killer.killed, "no worker node ran an engine actor after the first shard was published"
    assert 0 < killer.published_at_kill < total, "the node was killed with every row already answered"
    logs = flow_logs(state.state_details.flow_run_id)
    if not state.is_completed():  # the job lost its node for good: a second submission finishes the rows
        assert "Ray job" in state.message and "last log lines" in state.message
        state = synthesize(seeds=seeds, out=out, config=config, return_state=True)
        logs += flow_logs(state.state_details.flow_run_id)
    assert state.is_completed(), state.message
    summary = state.result()
    keys = record_keys(fs, f"{name}/synthesis/records")
    assert summary["plan"]["pending"] + summary["plan"]["cached"] == total
    assert len(keys) == len(set(keys)) == total  # no duplicates, nothing lost
    assert summary["dual_views"] + summary["rejected"] == total
    assert len(killer.nodes) >= 2, f"the engine actors ran on {len(killer.nodes)} node(s)"
    # the job's own lines, followed into the flow run's log
    assert any(line.startswith("synthesis: submitted as Ray job") for line in logs)
    assert any(line.startswith("synthesis: ") and "to send" in line for line in logs)
    assert any(line.endswith("succeeded") for line in logs)
    # nothing changed: deciding so lists the seeds and the shards and reads the manifest, never a seed
    # or a record (counted at the server; the same run from this process, without Ray)
    before, lines = s3_requests(s3_log), []
    again = run_synthesis(seeds.path, out, config.model_copy(update={"ray_job": None}), dict(seeds.storage_options),
                          progress=lines.append)
    requests = s3_requests(s3_log) - before
    assert UNCHANGED in lines and (again["plan"]["pending"], again["plan"]["cached"]) == (0, total), again["plan"]
    # 21 here: the bucket, the seeds listed, the manifest read and rewritten (atomically), the shard
    # folders listed (a page per 1,000 shards), the derived files and the seed map; none per row
    assert requests <= 25, f"an unchanged re-run made {requests} S3 requests"



def test_a_failed_ray_job_is_a_failed_flow_run_quoting_its_log(harness, cluster, bucket):
    _, name, seeds = bucket
    missing = seeds.model_copy(update={"path": f"s3://{name}/no-such-seeds/"})
    config = SynthesisConfig(engine="openai", ray_job=RayJobConfig(address=cluster.dashboard, poll_s=0.5, tail_lines=20))
    state = synthesize(seeds=missing, out=f"s3://{name}/synthesis", config=config, return_state=True)
    assert state.is_failed()
    assert "failed" in state.message and "last log lines" in state.message
    assert "no-such-seeds" in state.message.split("last log lines", 1)[1]  # the job's own error, from its log
