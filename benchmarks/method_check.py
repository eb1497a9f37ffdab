"""The method check: does the chain dual-view rows -> mixtures -> training -> p-MRR show the effect
when the reversed instructions are known to be correct?

Builds a controlled world (`dualview_core.world`: seeds and a FollowIR-format eval set on disjoint
topics), synthesizes its dual views with the reference engine (`engine: reference`, the known
correct reversal for every N*), and runs the `sweep` flow over Ins-orig, Ins-DV, All-orig and All-DV
at one budget (the same N instruct rows, the same optimizer steps and batch) and several seeds, all
tracked in an MLflow SQLite store under .cache/method_check/ with the sweep's figure. It ends by
printing one JSON line:

    {"ins_orig": {...}, "ins_dv": {...}, "all_orig": {...}, "all_dv": {...},
     "delta": D, "delta_ci": [LO, HI], "delta_p_value": P, ...}

Each mixture's p-MRR and Score are means over eval queries of the per-query value averaged over
seeds, with a 95% bootstrap interval over queries; D = Ins-DV - Ins-orig p-MRR, paired per query
(seeds averaged first), with its bootstrap interval and sign-flip p-value (`dualview_core.stats`).

Controls: `--corruption 1.0` swaps every dual-view instruction for another seed's (Ins-orig and
All-orig train clean), so D should vanish or turn negative; `--shortcut 0` builds a world whose
positives do not copy the query's wording more than its instruction negatives do.

Run:  nice -n 19 python benchmarks/method_check.py [--quick] [--corruption 1.0] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MIXTURES = ("ins-orig", "ins-dv", "all-orig", "all-dv")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps and a smaller world (<= 12 min on 2 cores)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds per mixture")
    p.add_argument("--corruption", type=float, default=0.0, help="fraction of dual-view instructions swapped")
    p.add_argument("--shortcut", type=float, default=1.0, help="share of seeds whose positive alone copies the query")
    p.add_argument("--mixtures", nargs="+", default=list(MIXTURES), choices=MIXTURES,
                   help="a subset for diagnostics (ins-orig and ins-dv are needed for the delta)")
    p.add_argument("--world-seed", type=int, default=0)
    p.add_argument("--steps", type=int, help="optimizer steps per point (default 16, --quick 8)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--negatives", type=int, default=2, help="K hard negatives per row (instruction negatives first)")
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--workdir", default=str(ROOT / ".cache" / "method_check"))
    p.add_argument("--keep-models", action="store_true", help="keep the trained checkpoints (about 0.3 GB each)")
    return p.parse_args(argv)


def per_query(report_path: Path) -> dict[str, dict[str, float]]:
    """metric -> query_id -> value from one evaluation's report.json (FollowIR: p-MRR, score)."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    return report["per_query"]


def seed_mean(values: list[dict[str, float]]) -> dict[str, float]:
    """Per query, the mean over seeds (queries every seed scored)."""
    common = set.intersection(*(set(v) for v in values))
    return {q: sum(v[q] for v in values) / len(values) for q in sorted(common)}


def summarise(points: list[dict], folder: Path, resamples: int, confidence: float) -> tuple[dict, dict]:
    """(mixture -> {p-MRR, score with intervals, seeds}, mixture -> metric -> per-query seed means)."""
    from dualview_core.stats import bootstrap_ci

    out, means = {}, {}
    for mixture in sorted({p["mixture"] for p in points}, key=MIXTURES.index):
        reports = [per_query(folder / f"{p['name']}-eval" / "report.json") for p in points if p["mixture"] == mixture]
        means[mixture] = {m: seed_mean([r[m] for r in reports]) for m in ("p-MRR", "score")}
        out[mixture] = {m: bootstrap_ci(list(v.values()), resamples, 0, confidence).as_dict() | {"queries": len(v)}
                        for m, v in means[mixture].items()}
        out[mixture]["per_seed_p-MRR"] = [round(sum(r["p-MRR"].values()) / len(r["p-MRR"]), 3) for r in reports]
    return out, means


def main(argv=None) -> int:
    args = parse_args(argv)
    from flows.commands import apply_project_env

    apply_project_env()  # before Prefect is imported
    from dualview_core.config import (EvaluationConfig, MixtureConfig, PipelineConfig, ReferenceEngineConfig,
                                      SeedSource, SweepConfig, SynthesisConfig, TrainingConfig)
    from dualview_core.keys import canonical_json, digest
    from dualview_core.stats import paired_test
    from dualview_core.world import WorldConfig, build_world
    from flows.sweep import sweep
    from tasks.tracking import mlflow_client

    start = time.perf_counter()
    load = os.getloadavg()
    world_cfg = WorldConfig(seed=args.world_seed, shortcut=args.shortcut,
                            **({"seed_topics": 64, "eval_topics": 40} if args.quick else {}))
    work = Path(args.workdir)
    world_dir = work / "worlds" / digest(canonical_json(world_cfg.__dict__), 6)
    files = build_world(world_cfg).write(world_dir)
    steps = args.steps or (8 if args.quick else 16)
    evaluation = EvaluationConfig(max_length=args.max_length, bootstrap_resamples=1000)
    pipeline = PipelineConfig(
        name="method-check",
        seeds=SeedSource(path=files["seeds"]),
        eval_set=SeedSource(path=files["eval_set"]),
        workdir=str(world_dir / "runs"),
        synthesis=SynthesisConfig(engine="reference", reference=ReferenceEngineConfig(world=files["world"])),
        training=TrainingConfig(mixture=MixtureConfig(corruption=args.corruption), max_length=args.max_length,
                                batch_size=args.batch_size, negatives=args.negatives, max_steps=steps,
                                learning_rate=args.learning_rate, eval_every=0, save_every=0,
                                grad_cache_chunk=0),  # small steps fit; no second forward pass
        evaluation=evaluation,
        tracking_uri=f"sqlite:///{work}/mlflow.db",
        artifact_location=str(work / "artifacts"),
    )
    config = SweepConfig(pipeline=pipeline, mixtures=tuple(args.mixtures), seeds=tuple(args.seeds))
    print(f"method check: world {world_dir.name} ({world_cfg.seed_topics} seed topics, {world_cfg.eval_topics} eval "
          f"queries), {len(args.mixtures)} mixtures x {len(args.seeds)} seeds, {steps} steps of {args.batch_size}, "
          f"corruption {args.corruption:g}, load {load[0]:.2f}", file=sys.stderr)
    result = sweep(config=config)
    run_id = result["mlflow_run_id"]
    folder = world_dir / "runs" / "sweep" / run_id
    table, means = summarise(result["points"], folder, evaluation.bootstrap_resamples, evaluation.confidence)
    delta = paired_test(means["ins-dv"]["p-MRR"], means["ins-orig"]["p-MRR"], resamples=10_000, seed=0)
    base = json.loads((world_dir / "runs" / "eval" / run_id / "base" / "report.json").read_text())["metrics"]
    wall = time.perf_counter() - start
    summary = {
        **{m.replace("-", "_"): table[m] for m in table},
        "delta": round(delta.difference.mean, 3),
        "delta_ci": [round(delta.difference.low, 3), round(delta.difference.high, 3)],
        "delta_p_value": delta.p_value,
        "base": {m: base[m] for m in ("p-MRR", "score") if m in base},
        "corruption": args.corruption, "shortcut": args.shortcut, "seeds": list(args.seeds), "steps": steps,
        "batch_size": args.batch_size, "negatives": args.negatives, "world": world_dir.name,
        "quick": args.quick, "mlflow_run_id": run_id, "tracking_uri": pipeline.tracking_uri,
        "wall_seconds": round(wall, 1), "load_at_start": round(load[0], 2), "load_at_end": round(os.getloadavg()[0], 2),
    }
    client = mlflow_client(pipeline.tracking_uri)
    for name, value in (("method_check/delta_p-MRR", delta.difference.mean), ("method_check/delta_p-MRR_ci_low", delta.difference.low),
                        ("method_check/delta_p-MRR_ci_high", delta.difference.high), ("method_check/delta_p-MRR_p_value", delta.p_value),
                        ("method_check/wall_seconds", wall)):
        client.log_metric(run_id, name, value)
    client.log_dict(run_id, summary, "method_check/summary.json")
    if not args.keep_models:
        for point in result["points"]:
            shutil.rmtree(folder / point["name"], ignore_errors=True)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
