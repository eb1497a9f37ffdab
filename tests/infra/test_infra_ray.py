"""The KubeRay RayCluster (infra/ray/raycluster.yaml): its own schema (a subset of KubeRay's CRD,
infra/schemas/), Kubernetes' PodTemplateSpec for every pod template, the rules KubeRay's webhook
enforces, and parity with ClusterConfig and the pinned Ray. Also how tasks reach it."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from kubernetes_validate.utils import schema_contents

from dualview_core.config import cluster
from dualview_core.config.cluster import ClusterConfig
from tests.helpers.infra import CFG, INFRA, KUBERNETES_VERSIONS, ROOT, find, pod_specs, pyproject_pin

RAY = find("RayCluster", CFG.ray_cluster)
SCHEMA = json.loads((INFRA / "schemas" / "raycluster-v1.schema.json").read_text())


def groups() -> dict[str, dict]:
    return {g["groupName"]: g for g in RAY["spec"]["workerGroupSpecs"]}


def pod_template_validator(version: str) -> jsonschema.Draft202012Validator:
    """Kubernetes' own PodTemplateSpec schema (strict), as kubernetes-validate bundles it."""
    from referencing import Registry, Resource

    folder = f"kubernetes-json-schema/v{version}.0-local-strict"
    schema = schema_contents(f"{folder}/podtemplatespec-v1.json", version)
    definitions = schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


# --- schema ---------------------------------------------------------------------------------------


def test_the_raycluster_matches_the_crd_subset_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(RAY, SCHEMA)


@pytest.mark.parametrize("mutate", [
    lambda r: r["spec"].update(workerGroupSpec=[]),  # typo of workerGroupSpecs
    lambda r: r["spec"]["workerGroupSpecs"][0].pop("maxReplicas"),
    lambda r: r["spec"]["headGroupSpec"]["rayStartParams"].update({"num-cpus": 0}),  # must be strings
    lambda r: r["spec"]["autoscalerOptions"].update(upscalingMode="Fast"),
])
def test_the_schema_rejects_what_kuberay_would(mutate):
    broken = copy.deepcopy(RAY)
    mutate(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_pod_template_is_a_valid_kubernetes_pod_template(version):
    validator = pod_template_validator(version)
    templates = [RAY["spec"]["headGroupSpec"]["template"]] + [g["template"] for g in groups().values()]
    for template in templates:
        errors = [e.message for e in validator.iter_errors(template)]
        assert not errors
    broken = copy.deepcopy(templates[-1])
    broken["spec"]["containers"][0]["volumeMount"] = []  # a typo two levels down: refs are followed
    assert list(validator.iter_errors(broken))


# --- KubeRay's own rules (ray-operator/controllers/ray/utils/validation.go) ----------------------------


def test_kuberay_validation_rules_hold():
    spec = RAY["spec"]
    for name, g in groups().items():
        assert g["minReplicas"] <= g.get("replicas", 0) <= g["maxReplicas"], name
        params = g.get("rayStartParams", {})
        assert not ({"num-cpus", "num-gpus", "memory", "resources"} & set(params) and g.get("resources")), name
        assert "labels" not in params, name
        assert g["template"]["spec"].get("restartPolicy", "Never") == "Never", "autoscaler v2 needs Never or unset"
    assert spec["headGroupSpec"]["template"]["spec"].get("restartPolicy", "Never") == "Never"
    if spec["authOptions"]["mode"] == "token":  # needs Ray >= 2.52
        assert tuple(map(int, spec["rayVersion"].split("."))) >= (2, 52, 0)
    assert spec["enableInTreeAutoscaling"] and spec["autoscalerOptions"]["version"] == "v2"
    for where, pod in pod_specs(RAY):
        assert pod["containers"][0]["name"] in ("ray-head", "ray-worker"), where  # Ray's container comes first


# --- parity with config and pins -------------------------------------------------------------------------


def test_ray_version_is_the_pinned_one_everywhere():
    ray = pyproject_pin("ray")
    assert RAY["spec"]["rayVersion"] == ray
    dockerfile = (ROOT / "docker" / "ray-vllm" / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{ray}-py311-cpu" in dockerfile
    assert f'"ray[data,serve]=={ray}"' in dockerfile


def test_every_ray_pod_runs_the_ray_vllm_image_of_this_tag():
    for where, pod in pod_specs(RAY):
        assert pod["containers"][0]["image"] == cluster.image(CFG, "ray-vllm"), where


def test_gpu_group_is_sized_by_the_config():
    gpu, v = groups()["gpu"], CFG.synthesis.vllm
    res = gpu["template"]["spec"]["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == CFG.gpus_per_ray_worker
    assert CFG.gpus_per_ray_worker % v.tensor_parallel_size == 0
    assert v.tensor_parallel_size == 4 and v.model == "Qwen/Qwen3-Next-80B-A3B-Instruct"
    assert (gpu["minReplicas"], gpu["maxReplicas"]) == (CFG.gpu_workers_min, CFG.gpu_workers_max)
    assert gpu["template"]["spec"]["nodeSelector"][cluster.GPU_PRODUCT_LABEL] == CFG.gpu_product
    assert groups()["cpu"]["maxReplicas"] == CFG.cpu_workers_max
    assert RAY["spec"]["autoscalerOptions"]["idleTimeoutSeconds"] == CFG.idle_timeout_s
    assert RAY["spec"]["authOptions"] == {"mode": "token", "secretName": CFG.secrets.ray}
    assert cluster.consistency_errors(CFG) == []


def test_the_model_cache_is_where_the_image_says():
    dockerfile = (ROOT / "docker" / "ray-vllm" / "Dockerfile").read_text()
    assert "HF_HOME=/cache/huggingface" in dockerfile
    for where in ("head", "gpu"):  # the head fetches the tokenizer when it is the driver (job mode)
        pod = dict(pod_specs(RAY))[where]
        volume = next(v["name"] for v in pod["volumes"]
                      if v.get("persistentVolumeClaim", {}).get("claimName") == "dualview-hf-cache")
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts[volume] == "/cache/huggingface", where


def _gib(quantity: str) -> float:
    return float(quantity.removesuffix("Gi"))


def test_shm_holds_rays_object_store():
    """Ray puts its object store (30% of memory by default) in /dev/shm; a smaller one spills to disk."""
    for where, pod in pod_specs(RAY):
        memory = _gib(pod["containers"][0]["resources"]["limits"]["memory"])
        shm = next(v["emptyDir"]["sizeLimit"] for v in pod["volumes"] if v["name"] == "dshm")
        assert _gib(shm) >= 0.3 * memory, where
        assert _gib(shm) < memory, where  # memory-backed: it counts against the limit


def test_the_head_takes_no_tasks_and_exposes_the_ports_tasks_use():
    head = RAY["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    ports = {p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
    assert {cluster.RAY_CLIENT_PORT, cluster.RAY_DASHBOARD_PORT} <= ports


# --- how tasks reach the cluster --------------------------------------------------------------------------


def test_ray_address_per_mode():
    host = f"{CFG.ray_cluster}-head-svc.{CFG.namespace}.svc.cluster.local"
    assert cluster.ray_address(ClusterConfig(ray_mode="client")) == f"ray://{host}:10001"
    assert cluster.ray_address(ClusterConfig(ray_mode="job")) == f"http://{host}:8265"


def test_the_job_entrypoint_is_a_valid_production_synthesis_command():
    from flows.cli import build_parser
    from flows.commands.synthesize_cli import config_from_args

    argv = cluster.synthesis_entrypoint("s3://b/seeds/", "s3://b/out/")
    assert argv[0] == "dualview"
    cfg = config_from_args(build_parser().parse_args(argv[1:]))
    assert cfg.ray_address == "auto" and cfg.vllm.tensor_parallel_size == CFG.synthesis.vllm.tensor_parallel_size
    assert cfg.vllm.model == CFG.synthesis.vllm.model and not cfg.vllm.cpu


@pytest.mark.parametrize("change, message", [
    ({"gpus_per_ray_worker": 6}, "not a multiple"),
    ({"gpu_workers_max": 3}, "fits 3"),
    ({"gpu_workers_min": 5}, "gpu_workers_min"),
])
def test_consistency_errors_catch_contradictions(change, message):
    errors = cluster.consistency_errors(ClusterConfig(**change))
    assert any(message in e for e in errors), errors
