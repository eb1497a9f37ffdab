"""Golden InfoSearch numbers from its authors' evaluator, for tests/unit/evaluation/test_reference_parity.py.

InfoSearch (EIT-NLP/InfoSearch) is no package and its code is not ours to copy, so this script runs
it from a local checkout on our seeded fixtures and writes what it answers to
tests/fixtures/reference/infosearch_golden.json. Only the functions that score are loaded, each from
its own file, without importing the fork of mteb they live in:

- `evaluators/utils.py: evaluate_change` — p-MRR (and WISE, SICR) from the "ori" run (original
  instruction), the "ins" run (changed instruction) and the "rev" run (reversed instruction);
- `abstasks/AbsTaskInstructionRetrieval.py: create_qrel_match` — which documents count: negatives
  are judged under qrels_og and their label changed to 0 under qrels_changed;
- `evaluators/RetrievalEvaluator.py: RetrievalEvaluator.evaluate` — nDCG@10 of a run (pytrec_eval,
  mean over queries rounded to 5 decimals).

    python -m benchmarks.reference.infosearch_golden /path/to/InfoSearch
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import logging
import subprocess
from collections import defaultdict
from pathlib import Path

from tests.helpers.reference_fixtures import instruction_sets

SEEDS = (0, 1, 2)
OUT = Path(__file__).parents[2] / "tests" / "fixtures" / "reference" / "infosearch_golden.json"
EVALUATORS = Path("mteb_infosearch/mteb/evaluation/evaluators")
ABSTASK = Path("mteb_infosearch/mteb/abstasks/AbsTaskInstructionRetrieval.py")


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_function(path: Path, name: str, namespace: dict):
    """One function (or method, its decorators dropped) out of a file, run in `namespace`."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            node.decorator_list = []
            exec(compile(ast.Module([node], type_ignores=[]), str(path), "exec"), namespace)
            return namespace[name]
    raise LookupError(f"{path}: no function {name}")


def as_loaded(qrels: dict[str, dict[str, int]]) -> defaultdict:
    """Qrels as its loader builds them: defaultdict(dict) of int labels."""
    out: defaultdict = defaultdict(dict)
    for q, docs in qrels.items():
        out[q].update({d: int(r) for d, r in docs.items()})
    return out


def golden(checkout: Path) -> dict:
    import typing

    import pytrec_eval

    utils = load_module(checkout / EVALUATORS / "utils.py", "infosearch_utils")
    match = load_function(checkout / ABSTASK, "create_qrel_match", {})
    ndcg_ns = {"pytrec_eval": pytrec_eval, "logger": logging.getLogger("infosearch"), **vars(typing)}
    evaluate = load_function(checkout / EVALUATORS / "RetrievalEvaluator.py", "evaluate", ndcg_ns)
    cases = []
    for seed in SEEDS:
        data = instruction_sets(seed, reversed_view=True)
        runs, qrels = data["runs"], {v: as_loaded(q) for v, q in data["qrels"].items()}
        positive, negative = match(None, qrels["og"], qrels["changed"])
        scores = utils.evaluate_change(runs["og"], runs["changed"], runs["reversed"], positive, negative)
        ndcg = evaluate(qrels["changed"], runs["changed"], [10], ignore_identical_ids=True)[0]
        cases.append({"seed": seed, "p-MRR": float(scores["p-MRR"]), "WISE": float(scores["WISE"]),
                      "SICR": float(scores["SICR"]), "ndcg_at_10_changed": float(ndcg["NDCG@10"])})
    return {"source": "EIT-NLP/InfoSearch", "commit": commit_of(checkout), "cases": cases}


def commit_of(checkout: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a local checkout of EIT-NLP/InfoSearch")
    parser.add_argument("--commit", help="the checkout's commit, when it is no git work tree")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    result = golden(args.checkout)
    result["commit"] = args.commit or result["commit"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
