"""MLflow: `mlflow_access` (the client, experiments, logging by run id) and `runs` (a run's lineage
and lifecycle), which uses it; never the other way round."""
