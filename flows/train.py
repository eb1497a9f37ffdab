"""Flow: train a bi-encoder on a mixture of seeds and dual views; log it as an MLflow run, the checkpoint
registered as a version of an MLflow model."""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from dualview_core.config.profiles import DataSourceOverrides, Profile, TrainingOverrides, for_training
from tasks.artifacts import train_artifacts
from tasks.tracking.runs import flow_run_tracked, train_lineage
from tasks.stages import artifact_scope, publish_artifacts, register_trained, train_tracked


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
    registered_model: str | None = None,
    register_alias: str | None = None,
) -> dict:
    """Writes the checkpoint to `models/<MLflow run id>` (default: the profile's `<workdir>/models`).
    A retry of this flow run reuses that run, so training resumes from `models/<run id>.state`.
    With more than one process the DeepSpeed launcher starts the ranks. The checkpoint becomes a new
    version of `registered_model` (default dualview-<mixture>-<backbone>), `register_alias` moved to it."""
    p = for_training(profile, seeds, config, processes, tracking_uri, registered_model, register_alias)
    dual_views = dual_views or p.layout().dual_views
    models = (models or p.layout().models).rstrip("/")
    tags, params = train_lineage(p.training, p.seeds, dual_views, dict(p.seeds.storage_options), profile)
    with flow_run_tracked(experiment, p.tracking_uri, p.artifact_location, flow_run.get_name() or "train",
                          tags, params) as run:
        result = train_tracked(run, p.seeds, dual_views, f"{models}/{run.run_id}", p.training, p.train_processes,
                               p.output_options())
        registered = register_trained(run, p, result["checkpoint"])
    publish_artifacts(train_artifacts(artifact_scope(), result, run, registered))
    return {**{k: v for k, v in result.items() if k != "history"}, "registered_model": registered}
