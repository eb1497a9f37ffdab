"""The Kubernetes deployment's configuration (`ClusterConfig`, `ClusterSecrets`) and what the cluster
side must agree on, computed from it: image references, service addresses, the Ray address per
`ray_mode`, the `pipeline` flow's parameters there, the Prefect job variables of each deployment, and
the contradictions no single field can see. The sizing arithmetic docs/cluster.md quotes is
dualview_core/config/sizing.py.

It is arithmetic on config, next to the stages' configs and below everything that runs. It must
not know Kubernetes clients, Prefect, Ray or vLLM; the manifests in infra/ are compared with it by
tests/infra/, never generated at run time. profiles/cluster.yaml is the one source of the cluster's
synthesis and training values (`ClusterConfig.synthesis`, `.training` read it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dualview_core.config import (ConfigModel, DataSource, EvaluationConfig, PipelineConfig, RayJobConfig,
                                  SynthesisConfig, TrainingConfig)

# image name -> what it runs (docker/<name>/Dockerfile builds it)
IMAGES = {
    "flow-runner": "Prefect flow runs (drivers) and the Prefect worker",
    "ray-vllm": "Ray head and workers: vLLM on GPUs, Ray Data stages on CPUs",
    "trainer": "the DeepSpeed trainer and GPU evaluation",
    "mlflow": "the MLflow tracking server",
}
PREFECT_SERVICE, PREFECT_PORT = "prefect-server", 4200
MLFLOW_SERVICE, MLFLOW_PORT = "mlflow", 5000
POSTGRES_SERVICE, POSTGRES_PORT = "postgres", 5432
RAY_CLIENT_PORT, RAY_DASHBOARD_PORT = 10001, 8265
FLOW_RUNNER_ACCOUNT = "dualview-flow-runner"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEPLOYMENTS = ("synthesize", "train", "evaluate", "pipeline", "sweep", "paper-experiment", "watch-seeds")


def _cluster_profile() -> PipelineConfig:
    from dualview_core.config.profiles import resolve  # profiles/cluster.yaml is the one source of these values

    return resolve("cluster")


def _cluster_synthesis() -> SynthesisConfig:
    """What the GPU worker group runs: the cluster profile's engine, without how a run reaches Ray
    (`pipeline_config` adds that from `ray_mode`)."""
    return _cluster_profile().synthesis.model_copy(update={"ray_job": None, "ray_address": None})


class ClusterSecrets(ConfigModel):
    """Names of the Kubernetes Secrets the manifests reference. Values never enter config, images or
    manifests; each description lists the keys the Secret must hold."""

    s3: str = Field(
        "dualview-s3", description="AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (+ AWS_ENDPOINT_URL_S3 for an "
        "S3-compatible store). Where the cluster has workload identity (IRSA, GKE WI), prefer it and leave this empty.",
    )
    huggingface: str = Field(
        "dualview-hf", description="HF_TOKEN, for gated models. Optional: Qwen3-Next is not gated, so pods start without it.",
    )
    mlflow_client: str = Field(
        "dualview-mlflow-client", description="MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD of the user flow "
        "runs and the trainer log as. A user of its own, not the admin: it can be revoked alone.",
    )
    mlflow_server: str = Field(
        "dualview-mlflow-server", description="MLFLOW_AUTH_ADMIN_USERNAME, MLFLOW_AUTH_ADMIN_PASSWORD, "
        "MLFLOW_FLASK_SERVER_SECRET_KEY. The admin password only seeds the first start; rotate it through MLflow.",
    )
    postgres: str = Field(
        "dualview-postgres", description="POSTGRES_PASSWORD of the one role owning the MLflow and Prefect databases. "
        "A managed database can give each service its own role; then split this Secret.",
    )
    prefect: str = Field(
        "dualview-prefect", description="PREFECT_API_AUTH_STRING ('user:password'): the server checks it, the "
        "worker and flow runs send it.",
    )
    ray: str = Field(
        "dualview-ray-auth", description="auth_token, KubeRay's token authentication (clients send it as "
        "RAY_AUTH_TOKEN). Without it anything that reaches the head can run code on the GPUs.",
    )


class ClusterConfig(ConfigModel):
    """The Kubernetes deployment: images, Ray worker groups, the trainer's GPUs and secret names.
    The manifests in infra/ carry these values and tests/infra/ fail when the two drift;
    this module derives service addresses and checks the sizing arithmetic."""

    namespace: str = Field(
        "dualview", description="Namespace of every dualview object. One namespace keeps Secrets and RBAC local; "
        "service addresses contain it.",
    )
    registry: str = Field(
        "ghcr.io/dualview", description="Prefix of the dualview images. A private registry needs an "
        "imagePullSecret on the namespace's service accounts.",
    )
    image_tag: str = Field(
        "0.1.0", description="Tag of every dualview image: the project version. Never 'latest': nodes cache tags, "
        "so a moved tag runs old code on some nodes and new code on others.",
    )
    ray_cluster: str = Field(
        "dualview", max_length=53, description="RayCluster name; KubeRay names the head Service '<name>-head-svc'.",
    )
    ray_mode: Literal["client", "job"] = Field(
        "job", description="How synthesis reaches Ray. job (profiles/cluster.yaml): the driver runs on the head, "
        "submitted over the dashboard's job API; sturdy for the 480k-row run, and the submitting pod may come and "
        "go. client: the flow run is the driver, over ray://; every row and answer crosses one gRPC connection, "
        "and losing it loses the run.",
    )
    synthesis: SynthesisConfig = Field(
        default_factory=_cluster_synthesis, description="What the GPU worker group runs. Its tensor_parallel_size "
        "and replicas size the GPU pods.",
    )
    training: TrainingConfig = Field(
        default_factory=lambda: _cluster_profile().training,
        description="What the training pod runs (profiles/cluster.yaml): the paper's gte-multilingual-mlm-base (305M "
        "parameters; bge-m3-retromae for its second table). ZeRO-2 shards "
        "optimizer state and gradients over the ranks: room for larger batches (more in-batch negatives) for a "
        "little communication; bf16 on GPU.",
    )
    gpu_product: str = Field(
        "NVIDIA-H100-80GB-HBM3", description="Value of the node label nvidia.com/gpu.product (NVIDIA GPU feature "
        "discovery) that GPU pods select, so a replica never lands on smaller GPUs.",
    )
    gpu_memory_gib: int = Field(
        80, gt=0, description="Memory of one GPU of that product. With the model's size it fixes the smallest "
        "tensor-parallel degree (dualview_core.config.sizing.min_tensor_parallel).",
    )
    gpus_per_ray_worker: int = Field(
        4, gt=0, description="GPUs of one Ray GPU worker pod: a multiple of tensor_parallel_size, so a replica's "
        "GPUs share a node (NVLink) instead of talking over the network.",
    )
    gpu_workers_max: int = Field(
        4, ge=0, description="Autoscaling ceiling of the GPU group, and so the GPU cost ceiling "
        "(gpus_per_ray_worker x this).",
    )
    gpu_workers_min: int = Field(
        0, ge=0, description="GPU pods kept when idle. 0 releases GPUs between runs; every scale-up then loads "
        "~160 GB of weights again (minutes).",
    )
    cpu_workers_max: int = Field(
        8, ge=0, description="Autoscaling ceiling of the CPU group (Ray Data's read and tokenize stages; a "
        "chat-template stage for the verification pass).",
    )
    idle_timeout_s: int = Field(
        600, ge=0, description="Seconds a Ray worker pod may idle before the autoscaler removes it. Shorter saves "
        "GPU hours; longer keeps weights loaded across back-to-back runs.",
    )
    trainer_gpus: int = Field(
        4, gt=0, description="GPUs of the training pod, one DeepSpeed rank each (`dualview train --processes`). "
        "One node: the launcher is not set up to span pods.",
    )
    secrets: ClusterSecrets = Field(default_factory=ClusterSecrets, description="Secret names the manifests reference.")


# --- addresses and what a deployment runs ------------------------------------------------------


def image(cfg: ClusterConfig, name: str) -> str:
    if name not in IMAGES:
        raise ValueError(f"unknown image {name!r}; expected one of {sorted(IMAGES)}")
    return f"{cfg.registry}/dualview-{name}:{cfg.image_tag}"


def service_host(cfg: ClusterConfig, service: str) -> str:
    return f"{service}.{cfg.namespace}.svc.cluster.local"


def prefect_api_url(cfg: ClusterConfig) -> str:
    return f"http://{service_host(cfg, PREFECT_SERVICE)}:{PREFECT_PORT}/api"


def mlflow_tracking_uri(cfg: ClusterConfig) -> str:
    return f"http://{service_host(cfg, MLFLOW_SERVICE)}:{MLFLOW_PORT}"


def ray_head_service(cfg: ClusterConfig) -> str:
    return f"{cfg.ray_cluster}-head-svc"  # KubeRay's name for the head Service


def ray_address(cfg: ClusterConfig) -> str:
    """client: what `ray.init` joins (SynthesisConfig.ray_address). job: the job API that
    `ray job submit --address` (or JobSubmissionClient) talks to."""
    host = service_host(cfg, ray_head_service(cfg))
    return f"ray://{host}:{RAY_CLIENT_PORT}" if cfg.ray_mode == "client" else f"http://{host}:{RAY_DASHBOARD_PORT}"


def synthesis_entrypoint(seeds: str, out: str) -> list[str]:
    """The command a submitted Ray job runs on the head (ray_mode 'job'): the CLI, joining the
    cluster it runs in."""
    return ["dualview", "synthesize", "--seeds", seeds, "--out", out, "--profile", "cluster",
            "--ray-address", "auto"]


# Experiments keep the server's default artifact root, mlflow-artifacts:/<experiment id>, proxied by it
# to S3. Basic auth judges a proxied artifact write by the experiment id that path starts with: under a
# root of our own (mlflow-artifacts:/dualview) it finds none and refuses the write (HTTP 403, seen in
# tests/integration/test_rehearsal.py). A local path would put artifacts on the pod's disk.
MLFLOW_ARTIFACTS = None


def pipeline_config(cfg: ClusterConfig, seeds: str, eval_set: str, workdir: str) -> PipelineConfig:
    """The `pipeline` flow's parameters on the cluster: the cluster's synthesis (joined over
    `ray_address` in client mode, submitted to it as a Ray Job in job mode) and training profiles, one
    DeepSpeed rank per trainer GPU, the MLflow server, and artifacts through it (`MLFLOW_ARTIFACTS`).
    Evaluation of the paper's suite (`eval_set` is the folder `dualview data get paper` wrote) at the
    full 512 tokens, refusing an eval set with a quarantined row. profiles/cluster.yaml holds the
    same values for the default ClusterConfig (tests/unit/config/test_profiles.py)."""
    reach = ({"ray_address": ray_address(cfg)} if cfg.ray_mode == "client"
             else {"ray_job": RayJobConfig(address=ray_address(cfg)), "ray_address": None})
    synthesis = cfg.synthesis.model_copy(update=reach)
    return PipelineConfig(seeds=DataSource(path=seeds), eval_set=DataSource(path=eval_set), workdir=workdir,
                          synthesis=synthesis, training=cfg.training, train_processes=cfg.trainer_gpus,
                          evaluation=EvaluationConfig(suite="paper", strict=True),
                          tracking_uri=mlflow_tracking_uri(cfg), artifact_location=MLFLOW_ARTIFACTS)


# --- Prefect job variables per deployment -----------------------------------------------------------


def _gpu_pod(cfg: ClusterConfig, gpus: int, cpu: str, memory: str, shm: str) -> dict:
    return {"image": image(cfg, "trainer"), "gpus": gpus, "cpu_request": cpu, "memory_request": memory,
            "memory_limit": memory, "shm_size": shm, "node_selector": {GPU_PRODUCT_LABEL: cfg.gpu_product},
            "tolerations": [GPU_TOLERATION]}


def job_variables(cfg: ClusterConfig) -> dict[str, dict]:
    """Work-pool job variables each `prefect.yaml` deployment sets on the `dualview-k8s` pool.

    Drivers (synthesize, watch-seeds) run on the base template's defaults: the flow-runner image and no
    GPU, since the GPUs are Ray's. Training-shaped runs get the trainer image and `trainer_gpus`;
    `pipeline`, `sweep` and `paper-experiment` run their stages in-process, so they need the training pod too."""
    train = _gpu_pod(cfg, cfg.trainer_gpus, cpu="16", memory="128Gi", shm="32Gi")
    return {"synthesize": {}, "watch-seeds": {}, "train": train, "sweep": train, "paper-experiment": train, "pipeline": train,
            "evaluate": _gpu_pod(cfg, 1, cpu="8", memory="64Gi", shm="8Gi")}


# --- consistency ----------------------------------------------------------------------------------


def consistency_errors(cfg: ClusterConfig) -> list[str]:
    """Contradictions inside one ClusterConfig that no single field's bounds can see."""
    v, errors = cfg.synthesis.vllm, []
    if v.cpu:
        errors.append("synthesis.vllm.cpu is the laptop profile; the cluster runs vLLM on GPUs")
    if cfg.gpus_per_ray_worker % v.tensor_parallel_size:
        errors.append(f"gpus_per_ray_worker={cfg.gpus_per_ray_worker} is not a multiple of "
                      f"tensor_parallel_size={v.tensor_parallel_size}: a replica would span pods")
    replicas_fit = cfg.gpu_workers_max * (cfg.gpus_per_ray_worker // v.tensor_parallel_size)
    if v.replicas > replicas_fit:
        errors.append(f"synthesis.vllm.replicas={v.replicas} but the GPU group fits {replicas_fit}")
    if cfg.gpu_workers_min > cfg.gpu_workers_max:
        errors.append("gpu_workers_min > gpu_workers_max")
    if cfg.training.precision == "fp32":
        errors.append("training.precision fp32 on GPUs halves throughput for nothing; use bf16 or auto")
    return errors
