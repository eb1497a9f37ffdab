"""Each image's `pip install`, resolved in a clean virtual environment, so that an image's pins cannot
drift from the project's (constraints.txt, pyproject.toml) unnoticed. Owns reading a Dockerfile's pip
installs and comparing what they resolve to with the pins; the Dockerfile parser, the image list and
GPU_REPLACED belong to tests/helpers/infra.py. Nothing is built or installed, and no Docker
engine is involved.

For each image: every `pip install` of its Dockerfile, merged into the image's final requirement set
(explicit `name==version` pins, the `-c` constraint files -- constraints.txt, or the copy a `grep -vE`
in the Dockerfile filtered -- and the project, `.` or the wheel built from it, with its extras), is
resolved once for a fresh `python -m venv` (`pip --python <venv> install --dry-run --ignore-installed
--report`, with the project's pip and its fast-deps feature), against PyPI alone (pip
configuration files and PIP_* variables of this machine are ignored; a PIP_CERT is kept). The project
comes from a copy of what the Dockerfile COPYs, never from the working tree.

A drift is a failed test with one line per package: image, package, both versions. Checked:
  - the Dockerfile's explicit pins, constraints.txt and pyproject.toml agree (before resolving: a
    disagreement would otherwise surface as pip's "ResolutionImpossible");
  - what the resolver picked equals every pin: the Dockerfile's, constraints.txt's (less GPU_REPLACED
    in the CUDA images, which drop those on purpose) and pyproject's (dependencies and the extras the
    image installs). This catches an image that stops applying a project pin (a wider grep filter,
    a lost `-c`), not only one that contradicts it.
Not checked: packages no pin covers (the CUDA images' nvidia-*, cuda-*, and what vllm needs beyond the
laptop lock) -- they resolve, but to whatever is newest.

What the resolution cannot reflect, and why:
  - flow-runner's torch==2.13.0+cpu comes from download.pytorch.org/whl/cpu, which does not resolve
    from here (DNS). It is offered instead, with --find-links, as a wheel holding only the .dist-info
    of the torch installed in this interpreter (`make install` puts 2.13.0+cpu there): name, version
    and Requires-Dist are all a resolver reads, so the resolution is the image's. That the index
    still serves that file is not checked. Another torch installed here skips flow-runner, saying so.
  - ray-vllm installs into rayproject/ray's own environment, which cannot be pulled here; this
    resolves from an empty venv, so packages the base already has are resolved afresh. Pinned
    packages are unaffected: pip must move an installed package onto its constraint.
  - The CUDA builds (torch 2.13.0, vllm 0.32.0, nvidia-*) are on PyPI: a dry run reads their metadata
    and needs no GPU. No part of any image needs the unreachable index except flow-runner's torch.

Network: one resolution per image per session (the `resolved` fixture); the drift test reuses the
mlflow image's. fast-deps reads each wheel's metadata by HTTP range requests; where an index cannot
answer them pip falls back to whole wheels (~2 GB for each CUDA image), through the project's pip
cache (.cache/pip, the Makefile's). No `--only-binary :all:`: deepspeed ships only an sdist, which the images build.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.helpers.infra import DOCKERFILES, GPU_REPLACED, ROOT, instructions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CUDA_IMAGES = ("ray-vllm", "trainer")  # drop GPU_REPLACED from the lock (test_infra_images.py checks the filter)
PYPI = "https://pypi.org/simple"
PIP_CACHE = ROOT / ".cache" / "pip"  # the Makefile's PIP_CACHE_DIR
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
RESOLVE_TIMEOUT_S = 900  # the CUDA images fetch ~2 GB of wheels for their metadata: about 3 min here

if sys.platform != "linux" or platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11):
    pytest.skip("the images are linux/amd64 with Python 3.11: markers and wheel tags would differ here",
                allow_module_level=True)


# --- what a Dockerfile installs ------------------------------------------------------------------------


@dataclass
class ImageInstall:
    """An image's pip installs, merged: what one `pip install` of its final requirement set takes."""

    requirements: list[str] = field(default_factory=list)  # explicit ones, as written (quotes removed)
    pins: dict[str, str] = field(default_factory=dict)  # canonical name -> version, of `name==version`
    constraints: list[str] = field(default_factory=list)  # lines of every -c file, after its grep filter
    project_extras: tuple[str, ...] | None = None  # None: the project is not installed
    other_index: dict[str, str] = field(default_factory=dict)  # requirement -> the index it comes from


def shell_commands(path: Path) -> Iterator[list[str]]:
    """The simple commands of every RUN, split into words (`a && b` gives two)."""
    for word, args in instructions(path):
        if word == "RUN":
            for command in re.split(r"&&|\|\||;", args):
                if command.strip():
                    yield shlex.split(command)


def filtered_constraint_files(path: Path) -> dict[str, list[str]]:
    """file name -> lines, for each `grep -vE 'PATTERN' constraints.txt > FILE` in the Dockerfile."""
    out = {}
    for words in shell_commands(path):
        if words[:2] == ["grep", "-vE"] and len(words) == 6 and words[3] == "constraints.txt" and words[4] == ">":
            lines = (ROOT / "constraints.txt").read_text().splitlines()
            out[Path(words[5]).name] = [ln for ln in lines if not re.search(words[2], ln)]
    return out


def project_requirement(token: str) -> tuple[str, ...] | None:
    """The extras, if `token` is the project: `.`, `.[x]`, or the wheel built from it, `$(ls .../dualview-*.whl)[x]`."""
    match = re.fullmatch(rf"(\.|\$\(ls \S+/{PROJECT}-\*\.whl\))(?:\[([\w,]+)\])?", token)
    if not match:
        return None
    return tuple(match.group(2).split(",")) if match.group(2) else ()


def image_install(path: Path) -> ImageInstall:
    """Read every `pip install` of a Dockerfile. An option this does not know fails: decide what it means."""
    install, filtered = ImageInstall(), filtered_constraint_files(path)
    for words in shell_commands(path):
        if words[:2] != ["pip", "install"]:
            continue
        args, index, reqs = iter(words[2:]), PYPI, []
        for arg in args:
            if arg == "--no-cache-dir":
                continue
            if arg == "--index-url":
                index = next(args).rstrip("/")
            elif arg == "-c":
                name = Path(next(args)).name
                lines = filtered[name] if name in filtered else (ROOT / name).read_text().splitlines()
                install.constraints += lines
            elif arg.startswith("-"):
                raise ValueError(f"{path}: pip install {arg}: an option this test does not read")
            elif (extras := project_requirement(arg)) is not None:
                install.project_extras = (install.project_extras or ()) + extras
            else:
                reqs.append(arg)
        for req in reqs:
            install.requirements.append(req)
            if version := exact_pin(parsed := Requirement(req)):
                install.pins[canonicalize_name(parsed.name)] = version
            if index != PYPI:
                install.other_index[req] = index
    return install


def exact_pin(req: Requirement) -> str | None:
    specs = list(req.specifier)
    return specs[0].version if len(specs) == 1 and specs[0].operator == "==" else None


# --- the project's pins --------------------------------------------------------------------------------


def pins_of(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and (version := exact_pin(req := Requirement(line))):
            out[canonicalize_name(req.name)] = version
    return out


def project_pins(name: str, install: ImageInstall) -> dict[str, dict[str, str]]:
    """source -> {package: version}: every pin the image must honour, by who decides it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in install.project_extras or ():
        declared += project["optional-dependencies"][extra]
    lock = pins_of((ROOT / "constraints.txt").read_text().splitlines())
    if name in CUDA_IMAGES:
        lock = {pkg: v for pkg, v in lock.items() if pkg not in GPU_REPLACED}
    return {"the Dockerfile": install.pins, "constraints.txt": lock, "pyproject.toml": pins_of(declared)}


def same(pin: str, version: str) -> bool:
    """PEP 440 `==`: a pin without a local label (2.13.0) matches a local build (2.13.0+cpu)."""
    return SpecifierSet(f"=={pin}").contains(version, prereleases=True)


def disagreements(name: str, sources: dict[str, dict[str, str]]) -> list[str]:
    """Pins two sources give one package differently: pip could only answer "ResolutionImpossible"."""
    return [f"{name}: {pkg} is {pins_a[pkg]} in {a}, {pins_b[pkg]} in {b}"
            for (a, pins_a), (b, pins_b) in itertools.combinations(sources.items(), 2)
            for pkg in sorted(pins_a.keys() & pins_b.keys())
            if not (same(pins_a[pkg], pins_b[pkg]) or same(pins_b[pkg], pins_a[pkg]))]


def drifts(name: str, sources: dict[str, dict[str, str]], resolved: dict[str, str]) -> list[str]:
    return [f"{name}: {pkg} is pinned {pin} in {source}, the image resolves {resolved[pkg]}"
            for source, pins in sources.items() for pkg, pin in sorted(pins.items())
            if pkg in resolved and not same(pin, resolved[pkg])]


# --- one resolution ------------------------------------------------------------------------------------


def build_context(path: Path, folder: Path) -> Path:
    """What the Dockerfile COPYs from the repository, copied: the project is built from that, as there."""
    folder.mkdir()
    for word, args in instructions(path):
        if word == "COPY" and "--from=" not in args:
            for source in args.split()[:-1]:
                src, dst = ROOT / source, folder / source.rstrip("/")
                if src.is_dir():
                    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
                else:
                    shutil.copy2(src, dst)
    return folder


def metadata_wheel(requirement: str, folder: Path) -> Path | None:
    """A wheel holding only the .dist-info of the installed distribution `requirement` pins, or None
    if another version (or none) is installed. Its metadata is all a dry run reads."""
    req = Requirement(requirement)
    try:
        dist = importlib.metadata.distribution(req.name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != exact_pin(req):
        return None
    wheel = dist.read_text("WHEEL")
    tag = re.search(r"^Tag: (\S+)$", wheel, re.MULTILINE).group(1)
    info = f"{req.name}-{dist.version}.dist-info"
    path = folder / f"{req.name}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{info}/METADATA", dist.read_text("METADATA"))
        zf.writestr(f"{info}/WHEEL", wheel)
        zf.writestr(f"{info}/RECORD", "")
    return path


def installed_version(package: str) -> str:
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"no {package}"


def pip_env() -> dict[str, str]:
    """This machine's pip settings left out (config files, local indexes, find-links): PyPI only, as in a build."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_CACHE_DIR=str(PIP_CACHE), PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1")
    if "PIP_CERT" in os.environ:  # a TLS-intercepting proxy's CA, where there is one
        env["PIP_CERT"] = os.environ["PIP_CERT"]
    return env


def resolve(name: str, install: ImageInstall, work: Path) -> dict[str, str]:
    """package -> version, as a fresh venv's pip resolves the image's install against PyPI."""
    links = work / "links"
    links.mkdir()
    for req, index in install.other_index.items():
        if metadata_wheel(req, links) is None:
            pytest.skip(f"{name}: {req} comes from {index}, unreachable from here, and this interpreter has "
                        f"{installed_version(Requirement(req).name)} installed, not that build")
    (work / "constraints.txt").write_text("\n".join(install.constraints) + "\n")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    reqs = list(install.requirements)
    if install.project_extras is not None:
        context = build_context(DOCKERFILES[name], work / "context")
        extras = f"[{','.join(install.project_extras)}]" if install.project_extras else ""
        reqs.append(f"{context}{extras}")
    report = work / "report.json"
    # the project's pip resolves for the fresh venv's interpreter (`--python`): fast-deps reads a wheel's
    # metadata by range requests instead of downloading it (about a third of the time and CPU here,
    # where the registry proxy offers no separate metadata files)
    cmd = [sys.executable, "-m", "pip", "--python", str(work / "venv" / "bin" / "python"), "install", "--dry-run",
           "--use-feature=fast-deps", "--ignore-installed", "--quiet", "--report", str(report), "--find-links", str(links), "-c", str(work / "constraints.txt"),
           *reqs]
    proc = subprocess.run(cmd, env=pip_env(), cwd=work, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S,
                          check=False)
    assert proc.returncode == 0, f"{name}: the image's pip install does not resolve:\n{proc.stderr[-4000:]}"
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


@pytest.fixture(scope="module")
def resolved(tmp_path_factory) -> Callable[[str], dict[str, str]]:
    """image -> {package: version} its install resolves to; pip runs once per image per session."""
    done: dict[str, dict[str, str]] = {}

    def get(name: str) -> dict[str, str]:
        if name not in done:
            done[name] = resolve(name, image_install(DOCKERFILES[name]), tmp_path_factory.mktemp(name))
        return done[name]

    return get


# --- tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_the_image_resolves_to_the_project_pins(name, resolved):
    install = image_install(DOCKERFILES[name])
    sources = project_pins(name, install)
    assert not disagreements(name, sources), "\n".join(disagreements(name, sources))
    versions = resolved(name)
    assert not drifts(name, sources, versions), "\n".join(drifts(name, sources, versions))
    # the report holds what each image must install: the explicit pins and, where installed, the project
    assert set(install.pins) <= set(versions), set(install.pins) - set(versions)
    assert (install.project_extras is None) != (PROJECT in versions), name


def test_a_changed_pin_is_reported_as_a_drift(tmp_path, resolved):
    """The same check on a copy of the mlflow image with boto3 moved off the project's pin, against the
    resolution of the real image (the copy would not resolve: its pin contradicts constraints.txt)."""
    text = DOCKERFILES["mlflow"].read_text()
    pinned = re.search(r"boto3==(\S+)", text).group(1)
    copy = tmp_path / "Dockerfile"
    copy.write_text(text.replace(f"boto3=={pinned}", "boto3==1.0.0"))
    sources = project_pins("mlflow", image_install(copy))
    assert disagreements("mlflow", sources) == [
        f"mlflow: boto3 is 1.0.0 in the Dockerfile, {pinned} in constraints.txt",
        f"mlflow: boto3 is 1.0.0 in the Dockerfile, {pinned} in pyproject.toml",
    ]
    assert drifts("mlflow", sources, resolved("mlflow")) == [
        f"mlflow: boto3 is pinned 1.0.0 in the Dockerfile, the image resolves {pinned}"]


def test_a_pin_the_image_stops_applying_is_reported_as_a_drift():
    """A package constraints.txt pins that resolves to another version (as a widened grep filter would
    let happen) is a drift, though nothing in the Dockerfile names it; GPU_REPLACED ones are not."""
    lock = pins_of((ROOT / "constraints.txt").read_text().splitlines())
    sources = project_pins("trainer", image_install(DOCKERFILES["trainer"]))
    assert drifts("trainer", sources, {"huey": "0.0.1", "triton": "0.0.1", "six": lock["six"]}) == [
        f"trainer: huey is pinned {lock['huey']} in constraints.txt, the image resolves 0.0.1"]


def test_the_install_reader_merges_pins_filtered_constraints_and_the_project(tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.11.7-slim-bookworm AS wheel\n"
        "RUN pip wheel --no-deps --wheel-dir /wheels . \\\n"
        "    && grep -vE '^(torch|numpy)==' constraints.txt > /wheels/constraints-gpu.txt\n"
        "RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu/ torch==2.13.0+cpu\n"
        "RUN pip install -c /tmp/wheels/constraints-gpu.txt \"$(ls /tmp/wheels/dualview-*.whl)[gpu]\" "
        "\"ray[data,serve]==2.60.0\" six\n")
    install = image_install(tmp_path / "Dockerfile")
    assert install.requirements == ["torch==2.13.0+cpu", "ray[data,serve]==2.60.0", "six"]
    assert install.pins == {"torch": "2.13.0+cpu", "ray": "2.60.0"}
    assert install.project_extras == ("gpu",)
    assert install.other_index == {"torch==2.13.0+cpu": "https://download.pytorch.org/whl/cpu"}
    kept = pins_of(install.constraints)
    assert "torch" not in kept and "numpy" not in kept and kept["ray"] == "2.60.0"


def test_an_option_the_reader_does_not_know_fails(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM python:3.11.7-slim-bookworm\nRUN pip install --pre x==1\n")
    with pytest.raises(ValueError, match="--pre"):
        image_install(tmp_path / "Dockerfile")


def test_a_pin_without_a_local_label_matches_a_local_build_but_not_the_reverse():
    assert same("2.13.0", "2.13.0+cpu") and not same("2.13.0+cpu", "2.13.0") and not same("2.13.0", "2.13.1")


def test_disagreeing_sources_are_named_before_any_resolution():
    sources = {"the Dockerfile": {"torch": "2.13.0+cpu"}, "constraints.txt": {"numpy": "2.3.5", "torch": "2.13.0+cpu"},
               "pyproject.toml": {"numpy": "2.4.0", "torch": "2.13.0"}}
    assert disagreements("x", sources) == ["x: numpy is 2.3.5 in constraints.txt, 2.4.0 in pyproject.toml"]
