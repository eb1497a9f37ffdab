"""A rehearsal of the cluster's topology on one machine, every service on 127.0.0.1.

What runs: a Prefect server and a process worker with the deployments from prefect.yaml; the MLflow
server as infra/mlflow/mlflow.yaml runs it (basic auth, a real PostgreSQL, artifacts proxied to S3);
moto S3 holding the seeds, the eval set and every output; a local Ray cluster of three nodes (a head
without CPUs, two workers) standing in for the KubeRay cluster.

The `pipeline` deployment runs with `profile: cluster` and only what cannot be the same here
overridden: the addresses (S3 endpoint, Ray job API, MLflow server), the models (SmolLM2 for
synthesis, with the compact prompt and decoding it can follow; MiniLM for training) and the device settings (the CPU vLLM profile; no GPUs, so no bf16 and
two DeepSpeed ranks on CPU). The test checks each stage ran where the profile sends it: synthesis as
a Ray Job whose driver ran on the head and whose engine ran on the worker nodes, never in the flow-run
process; results in the PostgreSQL behind MLflow and in S3. Then the same deployment with a wrong
MLflow password fails fast, before any synthesis, with one clear line, and no secret reaches a log.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import s3fs

from dualview_core import sample
from dualview_core.config.profiles import resolve
from tests.helpers.services import THROWAWAY_AWS, free_port
from tests.helpers.mlflow_auth import MlflowAuthServer, mlflow_auth_server
from tests.helpers.ray_cluster import LocalCluster, start_cluster
from tests.helpers.prefect_server import BIN, REPO, run_deployment, start, stop, wait_prefect_ready

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ENGINE_ACTOR = "MapWorker"  # Ray Data's actor class for a map_batches stage's actor pool
WRONG_PASSWORD = "not-the-password-4711"


@dataclass
class Topology:
    env: dict
    cluster: LocalCluster
    mlflow: MlflowAuthServer
    s3: str
    root: Path

    def logs(self) -> str:
        """Every service's log, for the secret checks."""
        return "\n".join(p.read_text(errors="replace") for p in self.root.rglob("*.log"))


@pytest.fixture(scope="module")
def topology(s3_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("rehearsal")
    with mlflow_auth_server(s3_server, root / "mlflow") as mlflow:
        cluster = start_cluster(("worker_a", "worker_b"), root / "ray", cpus_per_node=2)
        prefect_port, procs = free_port(), []
        env = {**os.environ, **THROWAWAY_AWS, "PREFECT_HOME": str(root / "prefect"),
               "PREFECT_API_URL": f"http://127.0.0.1:{prefect_port}/api", "PREFECT_CLI_PROMPT": "false",
               "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{root}/prefect.db",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "INFO",
               "PREFECT_WORKER_QUERY_SECONDS": "2",
               # the worker's pod gets these from the dualview-mlflow-client Secret
               "MLFLOW_TRACKING_USERNAME": mlflow.username, "MLFLOW_TRACKING_PASSWORD": mlflow.password}
        try:
            procs.append(start([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
                               root / "prefect.log", env, prefect_port, timeout=180))
            wait_prefect_ready(env)
            pool = _run(env, "prefect", "work-pool", "create", "dualview-process", "--type", "process")
            assert pool.returncode == 0, pool.stdout + pool.stderr
            deploy = _run(env, "prefect", "--no-prompt", "deploy", "--name", "pipeline")
            assert deploy.returncode == 0, deploy.stdout + deploy.stderr
            procs.append(start([str(BIN / "prefect"), "worker", "start", "--pool", "dualview-process", "--limit", "1"],
                               root / "worker.log", env))
            yield Topology(env, cluster, mlflow, s3_server, root)
        finally:
            for proc in reversed(procs):
                stop(proc)
            cluster.stop()


def _run(env: dict, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / cmd[0]), *cmd[1:]], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)


def overrides(t: Topology, bucket: str) -> dict:
    """What the cluster profile cannot be here: addresses, models, devices. Nothing else."""
    cpu = resolve("cpu")  # the laptop's engine and decoding, as they are
    options = {"client_kwargs": {"endpoint_url": t.s3}}
    return {
        "name": "rehearsal",
        "seeds": {"path": f"s3://{bucket}/seeds/", "storage_options": options},
        "eval_set": {"path": f"s3://{bucket}/eval/", "storage_options": options},  # the suite's folder, as `data get` writes it
        "workdir": f"s3://{bucket}/runs",
        "tracking_uri": t.mlflow.uri,
        "synthesis": {
            "ray_job": {"address": t.cluster.dashboard, "poll_s": 1.0},
            "prompt": cpu.synthesis.prompt,  # the one a 135M model can follow, with its decoding below
            "vllm": cpu.synthesis.vllm.model_dump(mode="json"),
            "sampling": cpu.synthesis.sampling.model_dump(mode="json"),
            "model_cache_dir": str(REPO / ".cache" / "models"),  # the packaged model, converted once
            "limit": 6, "shard_rows": 3,
        },
        "training": {"model": "minilm", "pooling": None, "precision": "auto", "zero_stage": 0,
                     "mixture": {"name": "ins-orig", "size": 8}, "max_length": 64, "batch_size": 4, "max_steps": 2,
                     "eval_every": 0},
        "train_processes": 2,
        "evaluation": {"suite": "sample", "max_length": 64, "bootstrap_resamples": 200},  # the paper's data is not here
    }


@pytest.fixture(scope="module")
def rehearsal(topology):
    t = topology
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": t.s3})
    bucket = f"rehearsal-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    fs.put(sample.seeds_path(), f"{bucket}/seeds/seeds.jsonl")
    fs.put(sample.followir_path().rstrip("/") + "/", f"{bucket}/eval/sample/", recursive=True)
    run = run_deployment(t.env, "pipeline/pipeline", {"profile": "cluster", "config": overrides(t, bucket)})
    return {"fs": fs, "bucket": bucket, "run": run}


def test_the_pipeline_runs_with_the_cluster_profile(rehearsal):
    run = rehearsal["run"]
    if run["state"] != "COMPLETED":
        pytest.fail(f"{run['state']}: {run['message']}\n" + "\n".join(run["logs"][-40:]), pytrace=False)


def test_synthesis_ran_as_a_ray_job_on_the_cluster(topology, rehearsal):
    from ray.job_submission import JobSubmissionClient

    jobs = [j for j in JobSubmissionClient(topology.cluster.dashboard).list_jobs() if "synthesize --spec" in j.entrypoint]
    assert [j.status.value for j in jobs] == ["SUCCEEDED"], [(j.entrypoint, j.status) for j in jobs]
    nodes = topology.cluster.node_ids()
    assert jobs[0].driver_node_id == nodes["head"]  # the driver ran on the head, not in the flow-run process
    workers = {nodes[n] for n in ("worker_a", "worker_b")}
    engine = [a for a in topology.cluster.state("actors") if ENGINE_ACTOR in a.get("class_name", "")]
    assert engine and {a["node_id"] for a in engine} <= workers
    logs = rehearsal["run"]["logs"]
    assert any(line.startswith("synthesis: submitted as Ray job") for line in logs)
    assert not any("Started a local Ray instance" in line for line in logs)


def test_results_are_in_postgresql_behind_mlflow_and_in_s3(topology, rehearsal):
    pg, fs, bucket = topology.mlflow.postgres, rehearsal["fs"], rehearsal["bucket"]
    runs = pg.query("mlflow", "SELECT r.run_uuid, r.name, r.status FROM runs r JOIN experiments e "
                              "ON r.experiment_id = e.experiment_id WHERE e.name = %s", ("rehearsal",))
    assert {name for _, name, _ in runs} >= {"synthesize", "train", "evaluate-base", "evaluate-trained"}
    assert {status for *_, status in runs} == {"FINISHED"}
    parents = [uuid_ for uuid_, *_ in runs if not pg.query(
        "mlflow", "SELECT 1 FROM tags WHERE run_uuid = %s AND key = 'mlflow.parentRunId'", (uuid_,))]
    assert len(parents) == 1
    [parent] = parents
    metrics = {k for (k,) in pg.query("mlflow", "SELECT DISTINCT key FROM metrics WHERE run_uuid = %s", (parent,))}
    assert {"sample/p-MRR", "trained/sample/p-MRR", "trained/sample/score", "base/sample/p-MRR"} <= metrics, sorted(metrics)
    fs.invalidate_cache()
    assert fs.exists(f"{bucket}/runs/synthesis/manifest.json")
    assert fs.exists(f"{bucket}/runs/eval/{parent}/trained/report.json")
    assert fs.ls(f"{bucket}/runs/models/{parent}")
    # artifacts went through the server into its bucket, under <experiment id>/<run id>/artifacts/
    keys = fs.find(topology.mlflow.artifacts.removeprefix("s3://"))
    by_name = {name: uuid_ for uuid_, name, _ in runs}
    for stage in ("synthesize", "train", "evaluate-trained"):
        assert any(f"/{by_name[stage]}/artifacts/" in key for key in keys), (stage, keys[:20])


def test_wrong_mlflow_credentials_fail_fast_with_one_line_and_no_secret_in_any_log(topology, rehearsal):
    t, bucket = topology, rehearsal["bucket"]
    from ray.job_submission import JobSubmissionClient

    jobs_before = len(JobSubmissionClient(t.cluster.dashboard).list_jobs())
    run = run_deployment(t.env, "pipeline/pipeline", {"profile": "cluster", "config": overrides(t, bucket)},
                         job_variables={"env": {"MLFLOW_TRACKING_PASSWORD": WRONG_PASSWORD}})
    assert run["state"] == "FAILED", run
    assert run["seconds"] is not None and run["seconds"] < 120, run["seconds"]
    message = run["message"] or ""  # the flow run's state: what the UI shows in its list
    assert "\n" not in message and t.mlflow.uri in message and f"'{t.mlflow.username}'" in message, message
    assert "rejected the credentials" in message and "MLFLOW_TRACKING_PASSWORD" in message, message
    assert len(JobSubmissionClient(t.cluster.dashboard).list_jobs()) == jobs_before  # nothing was synthesized
    everything = "\n".join([message, *run["logs"], *rehearsal["run"]["logs"], t.logs()])
    for secret in (WRONG_PASSWORD, t.mlflow.password, t.mlflow.admin_password, t.mlflow.postgres.password):
        assert secret not in everything
