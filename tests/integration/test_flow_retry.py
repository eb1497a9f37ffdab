"""A retried Prefect flow run continues its MLflow parent run and its unfinished stage runs; a stage
that had finished gets a new run (Prefect's test harness, SQLite MLflow).

Outputs are named after the parent run (`models/<run id>`), so continuing it is what lets a retried
training stage find and resume the state its failed attempt saved.
"""

from __future__ import annotations

import contextlib

import pytest
from prefect import flow
from prefect.testing.utilities import prefect_test_harness

from dualview_core.config import PipelineConfig
from tasks.tracking.runs import stage_run
from tasks.stages import pipeline_run
from tasks.tracking.mlflow_access import FLOW_RUN_TAG, log_metrics, mlflow_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=180):
        yield


def test_a_retried_flow_run_continues_its_parent_run(harness, tmp_path):
    config = PipelineConfig(name="retry-test", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    attempts: list[dict] = []

    @flow(retries=1, retry_delay_seconds=0)
    def flaky() -> str:
        with pipeline_run(config, "flaky") as run:
            ids = {"parent": run.run_id}
            attempts.append(ids)
            with stage_run(run, "synthesize") as done:  # finishes in both attempts
                ids["synthesize"] = done.run_id
            with contextlib.suppress(RuntimeError), stage_run(run, "train") as train:
                ids["train"] = train.run_id
                log_metrics(run.tracking_uri, train.run_id, {"train/loss": 1.0 / len(attempts)}, step=len(attempts))
                if len(attempts) == 1:
                    raise RuntimeError("the first attempt's training dies")
            if len(attempts) == 1:
                raise RuntimeError("so the flow run fails")
        return run.run_id

    @flow
    def steady() -> str:
        with pipeline_run(config, "steady") as run:
            return run.run_id

    returned = flaky()
    first, second = attempts
    assert returned == first["parent"] == second["parent"]
    assert first["train"] == second["train"], "the unfinished stage is continued"
    assert first["synthesize"] != second["synthesize"], "a finished stage run again is a new execution"
    client = mlflow_client(config.tracking_uri)
    parent = client.get_run(first["parent"])
    assert parent.info.status == "FINISHED" and parent.data.tags[FLOW_RUN_TAG]
    assert client.get_run(second["train"]).info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(second["train"], "train/loss")] == [(1, 1.0), (2, 0.5)]

    other = steady()  # another flow run: a run of its own
    top = {r.info.run_id for r in client.search_runs([parent.info.experiment_id])
           if "mlflow.parentRunId" not in r.data.tags}
    assert top == {first["parent"], other}
