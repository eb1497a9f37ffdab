"""tasks: the stages' runners — Ray Data pipelines, engines, DeepSpeed, MLflow and Prefect tasks.

    synthesis/   the three Ray Data passes, engines (vLLM, OpenAI-compatible), the record store
    training/    DeepSpeed trainer, gradient caching, the launcher, checkpoint output and state
    evaluation/  evaluate a model on an eval set, write runs and reports, the end-of-run tables
    tracking/    MLflow access (mlflow_access) and runs with their lineage (runs), one way
    stages       the Prefect tasks the flows wire together
    progress     progress lines with rates and ETAs

Each reads its inputs, calls `dualview_core`, writes, logs. Nothing here imports `flows`.
"""
