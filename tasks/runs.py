"""MLflow runs of flows: a parent run per flow run, a nested run per stage, all addressed by id.

Owns the run lifecycle — check that the tracking server takes our credentials, open (or, when
Prefect retries a flow run, reopen) the parent run, open or reopen a stage's nested run, close each
FINISHED or FAILED — and `RunRef`, the handle a stage logs through from whichever thread or process
runs it. What a run is tagged with is `tasks.lineage`'s business; what it logs is each stage's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks import tracking


@dataclass(frozen=True)
class RunRef:
    """An MLflow run, by id, in a tracking store: what a stage needs to log from anywhere."""

    tracking_uri: str
    experiment_id: str
    run_id: str

    def child(self, name: str, tags: dict | None = None, params: dict | None = None) -> RunRef:
        """A nested run: the one an earlier attempt of this flow run left unfinished, or a new one."""
        run_id = (tracking.reopen_child(self.tracking_uri, self.experiment_id, self.run_id, name)
                  or tracking.open_run(self.tracking_uri, self.experiment_id, name, parent=self.run_id, tags=tags,
                                       params=params))
        return RunRef(self.tracking_uri, self.experiment_id, run_id)

    def set_tags(self, tags: Mapping[str, object]) -> None:
        client = tracking.mlflow_client(self.tracking_uri)
        for key, value in tags.items():
            if value is not None:
                client.set_tag(self.run_id, key, str(value))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        tracking.log_metrics(self.tracking_uri, self.run_id, metrics, step)


@contextlib.contextmanager
def stage_run(parent: RunRef, name: str, tags: dict | None = None, params: dict | None = None) -> Iterator[RunRef]:
    """A nested run for one stage, closed FAILED if the stage raises."""
    run = parent.child(name, tags, params)
    try:
        yield run
    except BaseException:
        tracking.close_run(run.tracking_uri, run.run_id, failed=True)
        raise
    tracking.close_run(run.tracking_uri, run.run_id)


@task(name="open MLflow run", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def open_flow_run(experiment: str, tracking_uri: str, artifact_location: str | None, run_name: str,
                  tags: dict[str, str], params: dict[str, str]) -> RunRef:
    """A new parent run, or — when this Prefect flow run is a retry — the one its first attempt opened."""
    from prefect.runtime import flow_run

    exp = tracking.experiment_id(tracking_uri, experiment, artifact_location)
    flow_run_id = flow_run.get_id()
    if flow_run_id and (run_id := tracking.reopen_run(tracking_uri, exp, flow_run_id)):
        return RunRef(tracking_uri, exp, run_id)
    tags = {**tags, tracking.FLOW_RUN_TAG: flow_run_id}
    return RunRef(tracking_uri, exp, tracking.open_run(tracking_uri, exp, run_name, tags=tags, params=params))


@task(name="close MLflow run", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def close_flow_run(run: RunRef, failed: bool = False) -> None:
    tracking.close_run(run.tracking_uri, run.run_id, failed=failed)


@contextlib.contextmanager
def flow_run_tracked(experiment: str, tracking_uri: str, artifact_location: str | None, run_name: str,
                     tags: dict[str, str], params: dict[str, str]) -> Iterator[RunRef]:
    """The parent MLflow run of a flow: opened, yielded, closed FINISHED or FAILED. Every flow opens
    its run here before its first stage, so this is where a tracking server that refuses our
    credentials stops the flow (outside the retried task: a refusal is not transient)."""
    tracking.check_tracking_access(tracking_uri)
    run = open_flow_run(experiment, tracking_uri, artifact_location, run_name, tags, params)
    try:
        yield run
    except BaseException:
        close_flow_run(run, failed=True)
        raise
    close_flow_run(run)
