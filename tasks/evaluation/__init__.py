"""Evaluation runner: a model and an eval set in, runs, report.json and MLflow metrics out."""
