"""The method check: does the chain dual-view rows -> mixtures -> training -> p-MRR show the effect
when the reversed instructions are known to be correct?

Builds a controlled world (`tests.helpers.world`: seeds and a FollowIR-format eval set on disjoint
topics), synthesizes its dual views with the reference engine (`tests/helpers/reference_engine.py`, plugged in as `engine: plugin`; the known
correct reversal for every N*), and runs the `sweep` flow over Ins-orig, Ins-DV, All-orig and All-DV
at one budget (the same N instruct rows, the same optimizer steps and batch) and several seeds, all
tracked in an MLflow SQLite store under .cache/method_check/ with the sweep's figure. It ends by
printing one JSON line:

    {"ins_orig": {...}, "ins_dv": {...}, "all_orig": {...}, "all_dv": {...},
     "delta": D, "delta_ci": [LO, HI], "delta_p_value": P,
     "control": {"ins_dv": {...}, "all_dv": {...}, "delta": C, "delta_ci": [...], "clean_minus_corrupted": {...}},
     "synthesis": {"acceptance": ..., "names_target_value": ...}, "wall_seconds": ..., ...}

Each mixture's p-MRR and Score are means over eval queries of the per-query value averaged over
seeds, with a 95% bootstrap interval over queries; D = Ins-DV - Ins-orig p-MRR, paired per query
(seeds averaged first), with its bootstrap interval and sign-flip p-value (`dualview_core.evaluation.stats`).

The control (on unless `--no-control`): the dual-view mixtures trained again with every dual-view
instruction swapped for another seed's; C = corrupted Ins-DV - clean Ins-orig must not be above 0,
and clean - corrupted Ins-DV is what the correct instructions themselves are worth. `--corruption F`
instead corrupts a share F in the one sweep; `--shortcut S` sets the share of seeds whose positive
alone copies the query's wording (default 0.5); `--engine vllm` has the packaged SmolLM2 write the
dual views instead of the reference engine.

Run:  nice -n 19 python benchmarks/method_check.py [--quick] [--no-control] [--seeds 0 1 2]
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
    p.add_argument("--corruption", type=float, default=0.0,
                   help="fraction of dual-view instructions swapped, in the one sweep (no separate control then)")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="skip the control: the dual-view mixtures again with every dual-view instruction swapped "
                        "for another seed's, compared with the clean Ins-orig")
    p.add_argument("--shortcut", type=float, default=0.5,
                   help="share of seeds whose positive alone copies the query's wording (tests/helpers/world.py)")
    p.add_argument("--mixtures", nargs="+", default=list(MIXTURES), choices=MIXTURES,
                   help="a subset for diagnostics (ins-orig and ins-dv are needed for the delta)")
    p.add_argument("--engine", choices=("reference", "vllm"), default="reference",
                   help="who writes the dual views: the known correct reversals, or the packaged SmolLM2 on vLLM's CPU "
                        "engine (to see how far a tiny model is from them; not part of the time budget)")
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


def summarise(points: list[dict], layout, run_id: str, resamples: int, confidence: float) -> tuple[dict, dict]:
    """(mixture -> {p-MRR, score with intervals, seeds}, mixture -> metric -> per-query seed means)."""
    from dualview_core.evaluation.stats import bootstrap_ci

    out, means = {}, {}
    for mixture in sorted({p["mixture"] for p in points}, key=MIXTURES.index):
        reports = [per_query(Path(layout.sweep_point_evaluation(run_id, p["name"])) / "report.json")
                   for p in points if p["mixture"] == mixture]
        means[mixture] = {m: seed_mean([r[m] for r in reports]) for m in ("p-MRR", "score")}
        out[mixture] = {m: bootstrap_ci(list(v.values()), resamples, 0, confidence).as_dict() | {"queries": len(v)}
                        for m, v in means[mixture].items()}
        out[mixture]["per_seed_p-MRR"] = [round(sum(r["p-MRR"].values()) / len(r["p-MRR"]), 3) for r in reports]
    return out, means


def synthesis_quality(layout, world_file: str) -> dict:
    """How the engine's dual views compare with the known reversals: rows accepted, and the share of
    accepted instructions that name N*'s value of the attribute the seed's instruction constrains."""
    import pyarrow.parquet as pq

    from dualview_core.storage.layout import REJECTIONS
    from tests.helpers.world import read_metadata

    seeds = read_metadata(world_file)["seeds"]
    views = pq.read_table(layout.dual_views, columns=["query_id", "instruction", "positive", "model_id"]).to_pylist()
    rejected = pq.read_table(f"{layout.synthesis}/{REJECTIONS}", columns=["model_id"]).to_pylist()
    models = {v["model_id"] for v in views} | {r["model_id"] for r in rejected}

    def names_target(view: dict) -> bool:
        seed = seeds[view["query_id"]]
        return seed["passages"][view["positive"]["doc_id"]][seed["attribute"]].lower() in view["instruction"].lower()

    correct = sum(names_target(v) for v in views)
    return {"engine_models": sorted(models), "dual_views": len(views), "rejected": len(rejected),
            "acceptance": round(len(views) / max(1, len(views) + len(rejected)), 3),
            "names_target_value": round(correct / max(1, len(views)), 3)}


def interval(d) -> dict:
    return {"delta": round(d.difference.mean, 3), "delta_ci": [round(d.difference.low, 3), round(d.difference.high, 3)],
            "delta_p_value": d.p_value}


def main(argv=None) -> int:
    args = parse_args(argv)
    from flows.commands import apply_project_env

    apply_project_env()  # before Prefect is imported
    from dualview_core.config import (DataSource, EvaluationConfig, MixtureConfig, PipelineConfig, SweepConfig,
                                      SynthesisConfig, TrainingConfig)
    from dualview_core.keys import canonical_json, digest
    from dualview_core.method.mixtures import DUAL_VIEW_MIXTURES
    from dualview_core.evaluation.stats import paired_test
    from tests.helpers.reference_engine import reference_config
    from tests.helpers.world import WorldConfig, build_world
    from flows.sweep import sweep
    from tasks.tracking.mlflow_access import mlflow_client

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
        seeds=DataSource(path=files["seeds"]),
        eval_set=DataSource(path=files["eval_set"]),
        workdir=str(world_dir / "runs"),
        synthesis=(reference_config(files["world"])
                   if args.engine == "reference" else SynthesisConfig()),  # vllm: the cpu profile's SmolLM2
        training=TrainingConfig(mixture=MixtureConfig(corruption=args.corruption), max_length=args.max_length,
                                batch_size=args.batch_size, negatives=args.negatives, max_steps=steps,
                                learning_rate=args.learning_rate, eval_every=0, save_every=0,
                                grad_cache_chunk=0),  # small steps fit; no second forward pass
        evaluation=evaluation,
        tracking_uri=f"sqlite:///{work}/mlflow.db",
        artifact_location=str(work / "artifacts"),
    )
    layout, client = pipeline.layout(), mlflow_client(pipeline.tracking_uri)
    control = args.control and not args.corruption
    print(f"method check: world {world_dir.name} ({world_cfg.seed_topics} seed topics, {world_cfg.eval_topics} eval "
          f"queries), {len(args.mixtures)} mixtures x {len(args.seeds)} seeds, {steps} steps of {args.batch_size}, "
          f"corruption {args.corruption:g}{', then the corrupted control' if control else ''}, load {load[0]:.2f}",
          file=sys.stderr)

    def run(p: PipelineConfig, mixtures: tuple[str, ...]) -> tuple[str, dict, dict]:
        """One sweep: its run id, each mixture's summary and per-query seed means; checkpoints removed."""
        result = sweep(config=SweepConfig(pipeline=p, mixtures=mixtures, random_seeds=tuple(args.seeds)))
        run_id = result["mlflow_run_id"]
        table, means = summarise(result["points"], layout, run_id, evaluation.bootstrap_resamples, evaluation.confidence)
        if not args.keep_models:
            for point in result["points"]:
                shutil.rmtree(layout.sweep_point(run_id, point["name"]), ignore_errors=True)
        return run_id, table, means

    try:
        run_id, table, means = run(pipeline, tuple(args.mixtures))
    except ValueError as e:  # e.g. an LLM engine whose few accepted dual views cannot fill a batch
        print(json.dumps({"error": str(e).splitlines()[0], "engine": args.engine,
                          "synthesis": synthesis_quality(layout, files["world"]), "shortcut": args.shortcut,
                          "wall_seconds": round(time.perf_counter() - start, 1)}))
        return 1
    delta = paired_test(means["ins-dv"]["p-MRR"], means["ins-orig"]["p-MRR"], resamples=10_000, seed=0)
    base = json.loads((Path(layout.evaluation(run_id, "base")) / "report.json").read_text())["metrics"]
    summary = {**{m.replace("-", "_"): table[m] for m in table}, **interval(delta),
               "base": {m: base[m] for m in ("p-MRR", "score") if m in base}}
    if control:  # the dual-view mixtures again, every dual-view instruction swapped for another seed's
        corrupted = pipeline.model_copy(update={"training": pipeline.training.model_copy(
            update={"mixture": pipeline.training.mixture.model_copy(update={"corruption": 1.0})})})
        dv = tuple(m for m in args.mixtures if m in DUAL_VIEW_MIXTURES)
        control_id, control_table, control_means = run(corrupted, dv)
        vs_orig = paired_test(control_means["ins-dv"]["p-MRR"], means["ins-orig"]["p-MRR"], resamples=10_000, seed=0)
        content = paired_test(means["ins-dv"]["p-MRR"], control_means["ins-dv"]["p-MRR"], resamples=10_000, seed=0)
        summary["control"] = {"corruption": 1.0, **{m.replace("-", "_"): control_table[m] for m in control_table},
                              **interval(vs_orig), "clean_minus_corrupted": interval(content), "mlflow_run_id": control_id}
    wall = time.perf_counter() - start
    summary |= {
        "engine": args.engine, "synthesis": synthesis_quality(layout, files["world"]),
        "corruption": args.corruption, "shortcut": args.shortcut, "seeds": list(args.seeds), "steps": steps,
        "batch_size": args.batch_size, "negatives": args.negatives, "world": world_dir.name,
        "quick": args.quick, "mlflow_run_id": run_id, "tracking_uri": pipeline.tracking_uri,
        "wall_seconds": round(wall, 1), "load_at_start": round(load[0], 2), "load_at_end": round(os.getloadavg()[0], 2),
    }
    metrics = {"delta_p-MRR": delta.difference.mean, "delta_p-MRR_ci_low": delta.difference.low,
               "delta_p-MRR_ci_high": delta.difference.high, "delta_p-MRR_p_value": delta.p_value, "wall_seconds": wall}
    if control:
        metrics |= {"control_delta_p-MRR": vs_orig.difference.mean, "control_delta_p-MRR_ci_low": vs_orig.difference.low,
                    "control_delta_p-MRR_ci_high": vs_orig.difference.high}
    for name, value in metrics.items():
        client.log_metric(run_id, f"method_check/{name}", value)
    client.log_dict(run_id, summary, "method_check/summary.json")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
