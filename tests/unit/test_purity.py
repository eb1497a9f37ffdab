"""dualview_core stays pure: importing all of it pulls in no framework."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import dualview_core

FRAMEWORKS = ("prefect", "ray", "mlflow", "deepspeed", "vllm")


def test_core_imports_no_framework_in_a_clean_interpreter():
    modules = [m.name for m in pkgutil.walk_packages(dualview_core.__path__, "dualview_core.")]
    assert "dualview_core.data.seeds" in modules and len(modules) >= 8
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in {FRAMEWORKS!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_check_itself_would_notice_a_framework():
    code = "import sys, json; import mlflow; print(json.dumps(['mlflow' in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True]
