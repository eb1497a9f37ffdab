"""Every package the code imports is declared in pyproject.toml (dependencies or an extra).

Walks the import statements of dualview_core/, tasks/ and flows/ (top level and inside functions),
keeps third-party top-level names, maps each to the distributions that provide it
(`importlib.metadata.packages_distributions()`) and fails when none of them is declared.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dualview_core", "tasks", "flows")
# the project's own top-level packages: what pyproject's setuptools section ships
FIRST_PARTY = {name.rstrip("*") for name in
               tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]}
# imported only where a user asks for it, behind an ImportError with an install hint
OPTIONAL = {"faiss": "dualview_core/evaluation/retrieval.py: search='faiss' (pip install faiss-cpu)"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return {normalise(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}


def imported(files) -> dict[str, str]:
    """top-level third-party module -> the first file:line importing it."""
    found: dict[str, str] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY and top != "__future__":
                    found.setdefault(top, f"{path}:{node.lineno}")
    return found


def undeclared(files) -> dict[str, str]:
    providers, names = importlib.metadata.packages_distributions(), declared()
    return {module: where for module, where in imported(files).items()
            if module not in OPTIONAL and not {normalise(d) for d in providers.get(module, [module])} & names}


def code_files():
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]


def test_every_import_is_a_declared_dependency():
    missing = undeclared(code_files())
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_check_sees_imports_inside_functions(tmp_path):
    # the project imports heavy packages inside functions; the walk must find those too
    (tmp_path / "mod.py").write_text("import json\ndef f():\n    import scipy.stats\n    from numpy import array\n")
    assert set(imported([tmp_path / "mod.py"])) == {"scipy", "numpy"}
    assert set(undeclared([tmp_path / "mod.py"])) == {"scipy"}  # scipy is installed, but nothing declares it
