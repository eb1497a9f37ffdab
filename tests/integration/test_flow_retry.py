"""A retried Prefect flow run continues its MLflow parent run (Prefect's test harness, SQLite MLflow).

Outputs are named after the parent run (`models/<run id>`), so continuing it is what lets a retried
training stage find and resume the state its failed attempt saved.
"""

from __future__ import annotations

import pytest
from prefect import flow
from prefect.testing.utilities import prefect_test_harness

from dualview_core.config import PipelineConfig
from tasks.stages import pipeline_run
from tasks.tracking import FLOW_RUN_TAG, mlflow_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=180):
        yield


def test_a_retried_flow_run_continues_its_parent_run(harness, tmp_path):
    config = PipelineConfig(name="retry-test", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    attempts: list[str] = []

    @flow(retries=1, retry_delay_seconds=0)
    def flaky() -> str:
        with pipeline_run(config, "flaky") as run:
            attempts.append(run.run_id)
            if len(attempts) == 1:
                raise RuntimeError("the first attempt dies")
        return run.run_id

    @flow
    def steady() -> str:
        with pipeline_run(config, "steady") as run:
            return run.run_id

    assert flaky() == attempts[0] == attempts[1]
    client = mlflow_client(config.tracking_uri)
    parent = client.get_run(attempts[0])
    assert parent.info.status == "FINISHED" and parent.data.tags[FLOW_RUN_TAG]

    other = steady()  # another flow run: a run of its own
    assert other != attempts[0]
    runs = client.search_runs([parent.info.experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted({attempts[0], other})
