"""The Kubernetes manifests in infra/, checked offline: YAML lint, Kubernetes' own schemas, images,
non-root pods, resources and secret references. The readers they use are in tests/helpers/infra.py.

No cluster and no Docker engine are involved: schemas come bundled with kubernetes-validate
(Kubernetes 1.31 and 1.37 are checked), RayCluster has its own schema (test_infra_ray.py).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

from dualview_core.config import cluster
from tests.helpers.infra import (CFG, INFRA, KUBERNETES_VERSIONS, ROOT, all_objects, containers, find, manifest_files,
                                  pod_specs, pyproject_pin, secret_refs, tool, validate_k8s)

CUSTOM_KINDS = {"RayCluster"}  # validated against infra/schemas/, not Kubernetes' bundled schemas


# --- YAML ---------------------------------------------------------------------------------------------


def test_yamllint_passes_on_every_yaml_file():
    files = sorted(INFRA.rglob("*.yaml")) + [p for p in [ROOT / "prefect.yaml"] if p.exists()]
    assert len(files) >= 9
    proc = subprocess.run([tool("yamllint"), "-s", "-f", "parsable", "-c", str(INFRA / "yamllint.yaml"),
                           *map(str, files)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kustomization_lists_every_standing_manifest_and_no_run():
    listed = yaml.safe_load((INFRA / "kustomization.yaml").read_text())["resources"]
    standing = {str(p.relative_to(INFRA)) for p in manifest_files()} - {"training/train-job.yaml"}
    assert set(listed) == standing
    assert listed[0] == "namespace.yaml"  # everything else lives in it


# --- Kubernetes schemas -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_builtin_object_validates_strictly(version):
    objects = all_objects()
    builtin = [(p, o) for p, o in objects if o["kind"] not in CUSTOM_KINDS]
    assert {o["kind"] for _, o in objects} - {o["kind"] for _, o in builtin} == CUSTOM_KINDS
    assert len(builtin) >= 15
    for path, obj in builtin:
        try:
            validate_k8s(obj, version)
        except (ValidationError, SchemaNotFoundError) as exc:
            pytest.fail(f"{path.relative_to(ROOT)} {obj['kind']}/{obj['metadata'].get('name')}: {exc}")


def test_the_schema_check_rejects_a_misspelt_field():
    obj = find("Deployment", "mlflow")
    broken = yaml.safe_load(yaml.safe_dump(obj))
    broken["spec"]["template"]["spec"]["containers"][0]["resorces"] = {}
    with pytest.raises(ValidationError, match="resorces"):
        validate_k8s(broken, KUBERNETES_VERSIONS[0])


def test_every_object_is_in_the_configured_namespace():
    for path, obj in all_objects():
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == CFG.namespace
        else:
            assert obj["metadata"].get("namespace") == CFG.namespace, path


# --- images, users, resources ---------------------------------------------------------------------------

THIRD_PARTY = {  # repository -> the tags allowed
    "postgres": r"16\.\d+-bookworm",
    "prefecthq/prefect": re.escape(pyproject_pin("prefect")) + r"-python3\.11",
}


def test_every_image_is_a_dualview_image_of_this_tag_or_a_pinned_third_party_one():
    ours = {cluster.image(CFG, name) for name in cluster.IMAGES}
    seen = set()
    for path, obj in all_objects():
        for where, pod in pod_specs(obj):
            for c in containers(pod):
                seen.add(c["image"])
                repo, _, tag = c["image"].rpartition(":")
                if c["image"] not in ours:
                    assert repo in THIRD_PARTY and re.fullmatch(THIRD_PARTY[repo], tag), (path, where, c["image"])
    assert ours <= seen  # every dualview image runs somewhere (the flow runner as the Prefect worker)


def test_every_pod_runs_as_non_root_without_privilege_escalation():
    for path, obj in all_objects():
        for where, pod in pod_specs(obj):
            ctx = pod.get("securityContext", {})
            assert ctx.get("runAsNonRoot") is True, (path, where)
            assert isinstance(ctx.get("runAsUser"), int) and ctx["runAsUser"] > 0, (path, where)
            for c in containers(pod):
                assert c.get("securityContext", {}).get("allowPrivilegeEscalation") is False, (path, where, c["name"])


def test_every_container_requests_cpu_and_memory_and_caps_memory():
    for path, obj in all_objects():
        for where, pod in pod_specs(obj):
            for c in containers(pod):
                res = c["resources"]
                assert {"cpu", "memory"} <= set(res["requests"]), (path, where)
                assert "memory" in res["limits"], (path, where)
                gpus = res["requests"].get("nvidia.com/gpu")
                assert gpus == res["limits"].get("nvidia.com/gpu"), "extended resources need requests == limits"


def test_gpu_pods_select_the_gpu_product_and_have_a_memory_backed_shm():
    for path, obj in all_objects():
        for where, pod in pod_specs(obj):
            if not any(c["resources"]["limits"].get("nvidia.com/gpu") for c in pod["containers"]):
                continue
            assert pod["nodeSelector"] == {cluster.GPU_PRODUCT_LABEL: CFG.gpu_product}, (path, where)
            assert cluster.GPU_TOLERATION in pod["tolerations"]
            shm = [v for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
            mounts = {m["name"]: m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
            assert [mounts.get(v["name"]) for v in shm] == ["/dev/shm"], (path, where)


# --- secrets ------------------------------------------------------------------------------------------

SECRET_VALUE = re.compile(  # AWS key ids, Hugging Face tokens, user:password@ in URIs, password = ...
    r"(AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{20,}|://[^/\s:@]+:[^/\s@]+@|password\s*[:=]\s*\S+)", re.IGNORECASE)
SECRET_NAME = re.compile(r"(PASSWORD|TOKEN|SECRET|ACCESS_KEY|AUTH_STRING)", re.IGNORECASE)
SECRET_POINTERS = ("_SECRET_NAME", "_SECRET_KEY")  # names *of* secrets (the Prefect worker's settings)


def test_manifests_reference_only_the_configured_secrets_and_all_of_them():
    names = set(CFG.secrets.model_dump().values())
    pool = json.loads((INFRA / "prefect" / "k8s-work-pool.json").read_text())["job_configuration"]
    used = {name for _, obj in all_objects() for name, _ in secret_refs(obj)} | {n for n, _ in secret_refs(pool)}
    assert used == names


def test_secret_keys_are_the_ones_the_config_documents():
    described = {getattr(CFG.secrets, f): info.description for f, info in type(CFG.secrets).model_fields.items()}
    for path, obj in all_objects():
        for name, key in secret_refs(obj):
            if key is not None:
                assert key in described[name], f"{path.name}: key {key} of {name} is not in ClusterSecrets"


def test_no_secret_objects_and_no_credential_values_anywhere():
    assert not [o for _, o in all_objects() if o["kind"] == "Secret"]
    for path in [*INFRA.rglob("*"), *(ROOT / "docker").rglob("*"), ROOT / ".dockerignore"]:
        if path.is_file():
            hit = SECRET_VALUE.search(path.read_text())
            assert hit is None, f"{path.relative_to(ROOT)}: {hit.group(0)!r} looks like a credential"
    for path, obj in all_objects():
        for where, pod in pod_specs(obj):
            for c in containers(pod):
                for env in c.get("env", []):
                    if SECRET_NAME.search(env["name"]) and not env["name"].endswith(SECRET_POINTERS):
                        assert "valueFrom" in env, f"{path.name} {where}: {env['name']} has a literal value"


def test_the_credential_scan_would_notice_one():
    assert SECRET_VALUE.search("postgresql://dualview:hunter2@postgres:5432/mlflow")
    assert SECRET_VALUE.search("AKIAABCDEFGHIJKLMNOP")
    assert not SECRET_VALUE.search("postgresql://dualview@postgres.dualview.svc.cluster.local:5432/mlflow")


def test_the_runbook_names_every_secret_and_its_keys():
    runbook = (ROOT / "docs" / "cluster.md").read_text()
    for name in CFG.secrets.model_dump().values():
        assert name in runbook
    for key in ("POSTGRES_PASSWORD", "PREFECT_API_AUTH_STRING", "auth_token", "MLFLOW_TRACKING_PASSWORD",
                "MLFLOW_AUTH_ADMIN_PASSWORD", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"):
        assert key in runbook
