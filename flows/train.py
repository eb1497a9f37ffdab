"""Flow: train a bi-encoder on a mixture of seeds and dual views; log it as an MLflow run."""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from dualview_core.config.profiles import DataSourceOverrides, Profile, TrainingOverrides, for_training
from tasks.artifacts import train_artifacts
from tasks.tracking.runs import flow_run_tracked, train_lineage
from tasks.stages import artifact_scope, publish_artifacts, train_tracked


@flow(name="train", log_prints=True)
def train(
    profile: Profile = "cpu",
    seeds: DataSourceOverrides = DataSourceOverrides(),
    dual_views: str | None = None,
    models: str | None = None,
    config: TrainingOverrides = TrainingOverrides(),
    processes: int | None = None,
    experiment: str = "dualview-train",
    tracking_uri: str | None = None,
) -> dict:
    """Writes the checkpoint to `models/<MLflow run id>` (default: the profile's `<workdir>/models`).
    A retry of this flow run reuses that run, so training resumes from `models/<run id>.state`.
    With more than one process the DeepSpeed launcher starts the ranks."""
    p = for_training(profile, seeds, config, processes, tracking_uri)
    dual_views = dual_views or p.layout().dual_views
    models = (models or p.layout().models).rstrip("/")
    tags, params = train_lineage(p.training, p.seeds, dual_views, dict(p.seeds.storage_options))
    with flow_run_tracked(experiment, p.tracking_uri, p.artifact_location, flow_run.get_name() or "train",
                          tags, params) as run:
        result = train_tracked(run, p.seeds, dual_views, f"{models}/{run.run_id}", p.training, p.train_processes,
                               p.output_options())
    publish_artifacts(train_artifacts(artifact_scope(), result, run))
    return {k: v for k, v in result.items() if k != "history"}
