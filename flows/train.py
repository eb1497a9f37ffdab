"""Flow: train a bi-encoder on a mixture of seeds and dual views; log it as an MLflow run."""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from dualview_core.config import PipelineConfig, SeedSource, TrainingConfig
from flows.synthesize import DEFAULT_OUT
from tasks.lineage import train_lineage
from tasks.runs import flow_run_tracked
from tasks.stages import train_tracked

DEFAULTS = PipelineConfig()


@flow(name="train", log_prints=True)
def train(
    seeds: SeedSource = DEFAULTS.seeds,
    dual_views: str = f"{DEFAULT_OUT}/dual_views.parquet",
    models: str = f"{DEFAULTS.workdir}/models",
    config: TrainingConfig = DEFAULTS.training,
    processes: int = 1,
    experiment: str = "dualview-train",
    tracking_uri: str = DEFAULTS.tracking_uri,
) -> dict:
    """Writes the checkpoint to `models/<MLflow run id>`. A retry of this flow run reuses that run,
    so training resumes from `models/<run id>.state`."""
    tags, params = train_lineage(config, seeds, dual_views, dict(seeds.storage_options))
    with flow_run_tracked(experiment, tracking_uri, DEFAULTS.artifact_location, flow_run.get_name() or "train",
                          tags, params) as run:
        result = train_tracked(run, seeds, dual_views, f"{models.rstrip('/')}/{run.run_id}", config, processes)
    return {k: v for k, v in result.items() if k != "history"}
