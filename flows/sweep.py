"""Flow: a grid over mixtures, non-instruct ratios and seeds — the mixing question the paper left open.

Synthesis and the base model's evaluation run once; each grid point trains and evaluates in its own
nested MLflow run. The parent run gets a figure of the suite's columns per grid point, with whiskers,
and the flow ends with the same numbers as a table, one row per grid point (the paper's Table 1
shape when the suite is `paper`).
"""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from dualview_core.config.profiles import Profile, SweepOverrides, for_sweep
from dualview_core.training.sweep_grid import points
from tasks.tracking.runs import sweep_lineage
from tasks.evaluation.summary import cells_of, table
from tasks.artifacts import sweep_artifacts
from tasks.stages import (artifact_scope, evaluate_tracked, log_sweep_figure, pipeline_run, publish_artifacts,
                          synthesize_tracked, train_point)


@flow(name="sweep", log_prints=True)
def sweep(profile: Profile = "cpu", config: SweepOverrides = SweepOverrides()) -> dict:
    """`profile` supplies the pipeline fields `config.pipeline` leaves unset (see flows/pipeline.py)."""
    return run_grid(profile, config)


def run_grid(profile: Profile, config: SweepOverrides) -> dict:
    """The sweep's work inside the calling flow run: its MLflow parent, its table and its artifacts
    (under the caller's scope, so the paper-experiment flow's keys are its own)."""
    config = for_sweep(profile, config)
    p = config.pipeline
    layout = p.layout()
    with pipeline_run(p, flow_run.get_name() or "sweep", sweep_lineage(config, profile)) as run:
        synthesis = synthesize_tracked(run, p.seeds, layout.synthesis, p.synthesis, p.output_options())
        base = evaluate_tracked(run, "base", p.training.model, p.eval_set, p.evaluation, layout.evaluation(run.run_id, "base"),
                                p.output_options())
        results = [train_point(run, point, p) for point in points(config)]
        log_sweep_figure(run, results, base)
    rows = {"base": cells_of(base)} | {r["name"]: cells_of(r) for r in results}
    text = table(rows, {k: base.columns[k] for k in base.headline}, label=f"suite {base.suite}")
    print("\n" + text)
    publish_artifacts(sweep_artifacts(artifact_scope(), run, synthesis, base.as_dict(with_per_query=False), results))
    return {"mlflow_run_id": run.run_id, "points": results, "table": text}
