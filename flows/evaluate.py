"""Flow: evaluate one model on a suite (or one eval set): its columns with intervals; log them to MLflow."""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from dualview_core.config.profiles import DataSourceOverrides, EvaluationOverrides, Profile, for_evaluation
from tasks.artifacts import evaluate_artifacts
from tasks.tracking.runs import evaluate_lineage, flow_run_tracked
from tasks.stages import artifact_scope, evaluate_tracked, publish_artifacts
from tasks.evaluation.runner import metric_values
from tasks.evaluation.summary import comparison_table


@flow(name="evaluate", log_prints=True)
def evaluate(
    profile: Profile = "cpu",
    model: str | None = None,
    eval_set: DataSourceOverrides = DataSourceOverrides(),
    out: str | None = None,
    config: EvaluationOverrides = EvaluationOverrides(),
    experiment: str = "dualview-evaluate",
    tracking_uri: str | None = None,
) -> dict:
    """`model` defaults to the profile's base model (a folder, a hub id, or 'minilm'); a registered model
    (`models:/NAME/VERSION`, `models:/NAME@ALIAS`) is fetched from the tracking server into the project's
    cache. Reports go to `out/<MLflow run id>` (default: the profile's `<workdir>/eval`)."""
    p = for_evaluation(profile, eval_set, config, tracking_uri)
    model = model or p.training.model
    out = (out or p.layout().evaluations).rstrip("/")
    tags, params = evaluate_lineage(model, p.eval_set, p.evaluation)
    with flow_run_tracked(experiment, p.tracking_uri, p.artifact_location, flow_run.get_name() or "evaluate",
                          tags, params) as run:
        report = evaluate_tracked(run, "model", model, p.eval_set, p.evaluation, f"{out}/{run.run_id}", p.output_options())
        run.log_metrics(metric_values(report))  # the suite's names on the run the table shows
    print("\n" + comparison_table({model: report}))
    result = report.as_dict(with_per_query=False)
    publish_artifacts(evaluate_artifacts(artifact_scope(), model, result, f"{out}/{run.run_id}", run))
    return result
