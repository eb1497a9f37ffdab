"""The images in docker/, checked without a Docker engine: hadolint, pinned bases, non-root final
stages, no credentials, what they install against the project's pins, and the build context that
.dockerignore lets through. Nothing here builds an image."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

from dualview_core.config import cluster
from tasks.synthesis.engines import PASSTHROUGH_ENV
from tests.helpers.infra import DOCKER, DOCKERFILES, GPU_REPLACED, ROOT, instructions, pyproject_pin, tool

FLOW_RUN_IMAGES = ("flow-runner", "trainer")  # the work pool passes `prefect flow-run execute` as args


def stages(path: Path) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(path):
        if ins[0] == "FROM":
            result.append([])
        result[-1].append(ins)
    return result


def test_the_parser_joins_continuations_and_drops_comments(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text("FROM a:1.2.3 AS b\n# note\nRUN x \\\n    # inner\n    && y\nUSER 1\n")
    assert instructions(path) == [("FROM", "a:1.2.3 AS b"), ("RUN", "x && y"), ("USER", "1")]


def test_every_image_has_a_dockerfile_and_nothing_else_is_there():
    assert {p.parent.name for p in DOCKER.glob("*/Dockerfile")} == set(cluster.IMAGES)


@pytest.mark.parametrize("name", sorted(cluster.IMAGES))
def test_hadolint_finds_nothing(name):
    proc = subprocess.run([tool("hadolint"), "--no-color", str(DOCKERFILES[name])], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_would_complain_about_a_floating_base(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text("FROM python:latest\nRUN pip install requests\n")
    assert subprocess.run([tool("hadolint"), "--no-color", str(path)], capture_output=True, check=False).returncode != 0


@pytest.mark.parametrize("name", sorted(cluster.IMAGES))
def test_bases_are_pinned_to_exact_versions(name):
    for stage in stages(DOCKERFILES[name]):
        base = stage[0][1].split()[0]
        repo, _, tag = base.rpartition(":")
        assert repo and re.search(r"\d+\.\d+\.\d+", tag), f"{name}: {base} is not an exact version"


@pytest.mark.parametrize("name", sorted(cluster.IMAGES))
def test_final_stage_runs_as_a_numeric_non_root_user(name):
    final = stages(DOCKERFILES[name])[-1]
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1].isdigit() and int(users[-1]) > 0, f"{name}: {users}"


@pytest.mark.parametrize("name", ["flow-runner", "trainer", "mlflow", "ray-vllm"])
def test_builds_are_multi_stage_and_copy_only_from_build_stages_or_the_context(name):
    all_stages = stages(DOCKERFILES[name])
    assert len(all_stages) >= 2
    names = {s[0][1].split()[-1] for s in all_stages[:-1]}
    for word, args in all_stages[-1]:
        if word == "COPY" and "--from=" in args:
            assert re.search(r"--from=(\S+)", args).group(1) in names


@pytest.mark.parametrize("name", sorted(cluster.IMAGES))
def test_no_credential_enters_an_image(name):
    for word, args in instructions(DOCKERFILES[name]):
        if word in ("ENV", "ARG"):
            assert not re.search(r"(TOKEN|PASSWORD|SECRET|ACCESS_KEY|AUTH_STRING)\b", args, re.IGNORECASE), args
        if word in ("COPY", "ADD"):
            assert not re.search(r"\.env|\.pem|\.key|credentials|\.netrc", args), args


@pytest.mark.parametrize("name", FLOW_RUN_IMAGES)
def test_flow_run_images_have_no_entrypoint(name):
    assert not [a for w, a in instructions(DOCKERFILES[name]) if w == "ENTRYPOINT"]


def test_python_is_one_minor_version_everywhere():
    """A Ray client must run the cluster's Python minor version: flow runner, head and workers."""
    minors = set()
    for path in DOCKERFILES.values():
        for stage in stages(path):
            base = stage[0][1].split()[0]
            if base.startswith("python:"):
                minors.add(re.match(r"python:(\d+\.\d+)\.", base).group(1))
            elif base.startswith("rayproject/ray:"):
                minors.add("3." + re.search(r"-py3(\d+)", base).group(1))
    assert minors == {"3.11"}


# --- what the images install ---------------------------------------------------------------------------


def _text(name: str) -> str:
    return DOCKERFILES[name].read_text()


def test_pins_match_the_project():
    assert pyproject_gpu_extra() == ["vllm==0.32.0"]
    assert '"$(ls /tmp/wheels/dualview-*.whl)[gpu]"' in _text("ray-vllm")
    assert f"torch=={pyproject_pin('torch')}+cpu" in _text("flow-runner")
    assert f'"mlflow[auth]=={pyproject_pin("mlflow")}"' in _text("mlflow")
    assert f"boto3=={pyproject_pin('boto3')}" in _text("mlflow")
    for name in cluster.IMAGES:
        assert "constraints" in _text(name), f"{name} installs without the project's pins"


def pyproject_gpu_extra() -> list[str]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]


def test_the_gpu_images_drop_exactly_the_replaced_pins():
    expected = "grep -vE '^(" + "|".join(GPU_REPLACED) + ")==' constraints.txt"
    for name in ("ray-vllm", "trainer"):
        assert expected in _text(name), name
    pins = dict(line.strip().split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert set(GPU_REPLACED) <= set(pins), "a dropped pin no longer exists: update the filter"
    local_builds = {n for n, v in pins.items() if "+" in v}
    assert local_builds <= set(GPU_REPLACED), f"{local_builds} cannot come from PyPI for CUDA"


def test_the_flow_runner_passes_no_cache_settings_to_ray_workers():
    """tasks/ forward these variables from the driver to the vLLM workers (PASSTHROUGH_ENV); a
    driver-side HF_HOME or HF_HUB_OFFLINE would override the workers' shared model cache."""
    env = " ".join(a for w, a in instructions(DOCKERFILES["flow-runner"]) if w == "ENV")
    assert not [k for k in PASSTHROUGH_ENV if k.startswith(("HF_", "TRANSFORMERS_")) and f"{k}=" in env]


# --- the build context ---------------------------------------------------------------------------------


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def sent(path: str) -> bool:
    """Docker's rule, enough of it for these patterns: the last matching pattern wins, '!'
    re-includes, a pattern matching a folder matches everything below it, '**/' any depth."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    keep = True
    for pattern in _dockerignore():
        negate, pat = pattern.startswith("!"), pattern.lstrip("!").rstrip("/")
        if pat.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, pat[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(prefix, pat) for prefix in prefixes)
        if hit:
            keep = negate
    return keep


def test_dockerignore_sends_only_what_images_copy():
    assert _dockerignore()[0] == "*"
    for p in (".venv/bin/python", ".cache/models/x", ".git/config", "tests/infra/test_infra.py", "mlflow.db", ".env"):
        assert not sent(p), p
    for p in ("pyproject.toml", "constraints.txt", "dualview_core/config.py", "prompts/polarity_reversal.md"):
        assert sent(p), p
    assert not sent("dualview_core/__pycache__/config.cpython-311.pyc")
    assert not sent("tasks/__pycache__")


@pytest.mark.parametrize("name", sorted(cluster.IMAGES))
def test_every_copied_source_exists_and_is_sent(name):
    for word, args in instructions(DOCKERFILES[name]):
        if word == "COPY" and "--from=" not in args:
            *sources, _ = args.split()
            for source in sources:
                assert (ROOT / source).exists(), f"{name}: COPY {source}: no such path"
                assert sent(source.rstrip("/")), f"{name}: COPY {source}: excluded by .dockerignore"
