"""What the Kubernetes side must agree on, computed from `ClusterConfig`: image references, service
addresses, the Ray address per `ray_mode`, the Prefect job variables of each deployment, and the
sizing arithmetic of the 80B model that docs/cluster.md quotes.

It is arithmetic on config. It must not know Kubernetes clients, Prefect, Ray or vLLM; the manifests
in infra/ are compared with it by tests/unit/test_infra*.py, never generated at run time.

    >>> min_tensor_parallel(weights_gib(80e9, 2), gpu_memory_gib=80, utilization=0.9)
    4
"""

from __future__ import annotations

from dataclasses import dataclass

from dualview_core.config import ClusterConfig, EvaluationConfig, PipelineConfig, RayJobConfig, SeedSource

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
DEPLOYMENTS = ("synthesize", "train", "evaluate", "pipeline", "sweep", "watch-seeds")


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
    Evaluation at the full 512 tokens. profiles/cluster.yaml holds the same values for the default
    ClusterConfig (tests/unit/test_profiles.py)."""
    reach = ({"ray_address": ray_address(cfg)} if cfg.ray_mode == "client"
             else {"ray_job": RayJobConfig(address=ray_address(cfg)), "ray_address": None})
    synthesis = cfg.synthesis.model_copy(update=reach)
    return PipelineConfig(seeds=SeedSource(path=seeds), eval_set=SeedSource(path=eval_set), workdir=workdir,
                          synthesis=synthesis, training=cfg.training, train_processes=cfg.trainer_gpus,
                          evaluation=EvaluationConfig(),
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
    `pipeline` runs its stages in-process, so it needs the training pod too."""
    train = _gpu_pod(cfg, cfg.trainer_gpus, cpu="16", memory="128Gi", shm="32Gi")
    return {"synthesize": {}, "watch-seeds": {}, "train": train, "sweep": train, "pipeline": train,
            "evaluate": _gpu_pod(cfg, 1, cpu="8", memory="64Gi", shm="8Gi")}


# --- sizing -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HybridModel:
    """What memory sizing needs from a hybrid (linear + full attention) MoE model's config.json."""

    params: float  # total parameters (all experts)
    layers: int
    full_attention_interval: int  # every n-th layer is full attention; the rest are Gated DeltaNet
    kv_heads: int
    head_dim: int
    linear_value_heads: int
    linear_key_dim: int
    linear_value_dim: int


# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (80B total, 3B active per token).
QWEN3_NEXT_80B = HybridModel(params=80e9, layers=48, full_attention_interval=4, kv_heads=2, head_dim=256,
                             linear_value_heads=32, linear_key_dim=128, linear_value_dim=128)
GIB = 2**30


def weights_gib(params: float, bytes_per_param: float) -> float:
    """BF16 = 2 bytes, FP8 = 1 byte. 80e9 params in BF16: 160 GB = 149 GiB."""
    return params * bytes_per_param / GIB


def min_tensor_parallel(weights: float, gpu_memory_gib: float, utilization: float, reserve: float = 0.25) -> int:
    """Smallest power-of-two TP degree whose weight shard leaves `reserve` of vLLM's budget
    (utilization x GPU memory) for KV cache, activations and CUDA graphs."""
    budget = utilization * gpu_memory_gib * (1 - reserve)
    tp = 1
    while weights / tp > budget:
        tp *= 2
    return tp


def kv_bytes_per_token(m: HybridModel, dtype_bytes: int = 2) -> int:
    """K and V of the full-attention layers only; the linear layers keep a fixed state instead.
    Qwen3-Next: 2 x 12 layers x 2 heads x 256 x 2 bytes = 24 KiB per token."""
    return 2 * (m.layers // m.full_attention_interval) * m.kv_heads * m.head_dim * dtype_bytes


def linear_state_bytes_per_sequence(m: HybridModel, dtype_bytes: int = 2) -> int:
    """The Gated DeltaNet recurrent state (heads x key dim x value dim per linear layer), independent of
    length. The short convolution state (~5% more) is left out. Qwen3-Next: 36 x 32 x 128 x 128 x 2 B = 36 MiB."""
    linear_layers = m.layers - m.layers // m.full_attention_interval
    return linear_layers * m.linear_value_heads * m.linear_key_dim * m.linear_value_dim * dtype_bytes


@dataclass(frozen=True)
class SynthesisEstimate:
    prompt_tokens: int
    completion_tokens: int
    hours: float  # wall clock on all replicas


def synthesis_estimate(rows: int, prompt_tokens_per_row: float, completion_tokens_per_row: float, *,
                       prefill_tokens_per_s: float, decode_tokens_per_s: float, replicas: int) -> SynthesisEstimate:
    """Tokens and hours for `rows` LLM calls. Per replica, prefill and decode are added (no overlap):
    a pessimistic model, since continuous batching overlaps them. Rates are per replica.

    >>> synthesis_estimate(1000, 1000, 100, prefill_tokens_per_s=1000, decode_tokens_per_s=100, replicas=2).hours
    0.2777777777777778
    """
    prompt, completion = round(rows * prompt_tokens_per_row), round(rows * completion_tokens_per_row)
    seconds = (prompt / prefill_tokens_per_s + completion / decode_tokens_per_s) / replicas
    return SynthesisEstimate(prompt, completion, seconds / 3600)


def rows_in_flight(cfg: ClusterConfig) -> int:
    """Rows Ray Data keeps inside one vLLM replica: the engine can batch no more than this."""
    v = cfg.synthesis.vllm
    return v.batch_size * v.max_concurrent_batches


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
