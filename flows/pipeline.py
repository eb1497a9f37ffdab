"""Flow: synthesize → mixture → train → evaluate the trained and the base model, as one MLflow run.

The parent run carries the flattened config, the lineage tags, the inputs as datasets and the
headline numbers (both models' p-MRR and Score, their paired difference, synthesis acceptance and
cost, final loss), so pipeline runs compare row by row; each stage logs into its own nested run.
The trained model, once evaluated, is registered (`config.registered_model`, `config.register_alias`).
Ends with a table of p-MRR and Score (with 95% intervals) for both models and their difference.
"""

from __future__ import annotations

from prefect import flow
from prefect.runtime import flow_run

from dualview_core.config.profiles import PipelineOverrides, Profile, explicit, resolve
from tasks.artifacts import pipeline_artifacts
from tasks.stages import (artifact_scope, check_eval_set, evaluate_tracked, log_headline, pipeline_run, publish_artifacts,
                          register_trained, synthesize_tracked, train_tracked)
from tasks.tracking.runs import pipeline_lineage
from tasks.evaluation.summary import comparison_table


@flow(name="pipeline", log_prints=True)
def pipeline(profile: Profile = "cpu", config: PipelineOverrides = PipelineOverrides()) -> dict:
    """`profile` (profiles/<name>.yaml) supplies every field `config` leaves empty; on the Kubernetes
    deployments (profile cluster), filling only `config.seeds.path` runs the paper's job on your seeds."""
    config = resolve(profile, explicit(config))
    layout, options = config.layout(), config.output_options()
    check_eval_set(config.eval_set, config.evaluation)  # strict: a bad eval set before any cost, not after
    with pipeline_run(config, flow_run.get_name() or "pipeline", pipeline_lineage(config, profile)) as run:
        synthesis = synthesize_tracked(run, config.seeds, layout.synthesis, config.synthesis, options)
        trained = train_tracked(run, config.seeds, layout.dual_views, layout.model(run.run_id),
                                config.training, config.train_processes, options)
        reports = {label: evaluate_tracked(run, label, model, config.eval_set, config.evaluation,
                                           layout.evaluation(run.run_id, label), options)
                   for label, model in (("base", config.training.model), ("trained", trained["checkpoint"]))}
        headline = log_headline(run, config, synthesis, trained, reports)
        registered = register_trained(run, config, trained["checkpoint"], reports["trained"])
    table = comparison_table(reports, headline)
    print("\n" + table)
    results = {label: r.as_dict(with_per_query=False) for label, r in reports.items()}
    publish_artifacts(pipeline_artifacts(artifact_scope(), run, synthesis, trained, results, headline, registered))
    return {"mlflow_run_id": run.run_id, "mlflow_experiment_id": run.experiment_id, "synthesis": synthesis,
            "checkpoint": trained["checkpoint"], "registered_model": registered,
            "metrics": {label: r["metrics"] for label, r in results.items()},
            "headline": headline, "table": table}
