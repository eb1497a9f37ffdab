"""Flow: evaluate one model on one eval set (p-MRR and Score with intervals); log it to MLflow."""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from dualview_core.config import EvaluationConfig, PipelineConfig, SeedSource
from tasks.lineage import evaluate_lineage
from tasks.runs import flow_run_tracked
from tasks.stages import evaluate_tracked
from tasks.summary import comparison_table

DEFAULTS = PipelineConfig()


@flow(name="evaluate", log_prints=True)
def evaluate(
    model: str = "minilm",
    eval_set: SeedSource = DEFAULTS.eval_set,
    out: str = f"{DEFAULTS.workdir}/eval",
    config: EvaluationConfig = DEFAULTS.evaluation,
    experiment: str = "dualview-evaluate",
    tracking_uri: str = DEFAULTS.tracking_uri,
) -> dict:
    tags, params = evaluate_lineage(model, eval_set, config)
    with flow_run_tracked(experiment, tracking_uri, DEFAULTS.artifact_location, flow_run.get_name() or "evaluate",
                          tags, params) as run:
        report = evaluate_tracked(run, "model", model, eval_set, config, f"{out.rstrip('/')}/{run.run_id}")
    print("\n" + comparison_table({model: report}))
    return report.as_dict(with_per_query=False)
