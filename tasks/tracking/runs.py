"""MLflow runs of flows, addressed by id: what a run says it is (lineage) and its lifecycle.

Lineage: per flow, which facts identify a run — the code (git commit), the models, the mixture, the
data (paths and digests) — so that a `train` run names the synthesis model found in the dual views
it trained on and an `evaluate` run names only the model it evaluated, never a default of a stage
that did not run. Params are the stage configs the flow ran, flattened and without secrets.

Lifecycle: check that the tracking server takes our credentials, open (or, when Prefect retries a
flow run, reopen) the parent run, open or reopen a stage's nested run, close each FINISHED or
FAILED; `RunRef` is the handle a stage logs through from whichever thread or process runs it. Every
call goes through `tasks.tracking.mlflow_access`'s client by run id; MLflow's process-wide state is never set.
What a stage logs is the stage's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE

from dualview_core.config import DataSource, EvaluationConfig, PipelineConfig, SweepConfig, TrainingConfig
from tasks.tracking import mlflow_access as tracking
from tasks.tracking.mlflow_access import flatten, git_commit

# --- lineage --------------------------------------------------------------------------------------

KIND, GIT_COMMIT = "dualview.run_kind", "dualview.git_commit"  # kind: pipeline, sweep, train, evaluate
SYNTHESIS_MODEL, PROMPT_VERSION = "dualview.synthesis_model", "dualview.prompt_version"
BASE_MODEL, MIXTURE, MODEL = "dualview.base_model", "dualview.mixture", "dualview.model"
SEEDS, DUAL_VIEWS, EVAL_SET = "dualview.seeds", "dualview.dual_views", "dualview.eval_set"
PROFILE, FILTERING = "dualview.profile", "dualview.filtering"  # the profile a run resolved; synthesis.filtering
# models:/NAME/VERSION: on a pipeline or train run the version it registered, on an evaluate run the one it evaluated
REGISTERED_MODEL = "dualview.registered_model"

Lineage = tuple[dict[str, str], dict[str, str]]  # (tags, params)


def _tags(kind: str, **tags: object) -> dict[str, str]:
    return {KIND: kind, GIT_COMMIT: git_commit(), **{k: str(v) for k, v in tags.items() if v is not None}}


def pipeline_lineage(config: PipelineConfig, profile: str | None = None) -> Lineage:
    """The synthesis stage adds the prompt version and the seed fingerprint it found (`synthesize_tracked`),
    training the data digest, registration the model version."""
    tags = _tags("pipeline", **{SYNTHESIS_MODEL: config.synthesis.model_id(), BASE_MODEL: config.training.model,
                                MIXTURE: config.training.mixture.name, SEEDS: config.seeds.path,
                                EVAL_SET: config.eval_set.path, PROFILE: profile,
                                FILTERING: config.synthesis.filtering})
    return tags, flatten(config)


def sweep_lineage(config: SweepConfig, profile: str | None = None) -> Lineage:
    p = config.pipeline
    tags = _tags("sweep", **{SYNTHESIS_MODEL: p.synthesis.model_id(), BASE_MODEL: p.training.model,
                             MIXTURE: ",".join(config.mixtures), SEEDS: p.seeds.path, EVAL_SET: p.eval_set.path,
                             PROFILE: profile, FILTERING: p.synthesis.filtering})
    return tags, flatten(config)


def train_lineage(config: TrainingConfig, seeds: DataSource, dual_views: str, storage_options: dict,
                  profile: str | None = None) -> Lineage:
    """The synthesis model and prompt version are read from the dual views themselves."""
    made_by = dual_view_origin(dual_views, storage_options)
    tags = _tags("train", **{BASE_MODEL: config.model, MIXTURE: config.mixture.name, SEEDS: seeds.path,
                             DUAL_VIEWS: dual_views, PROFILE: profile, **made_by})
    return tags, {**flatten(config, "training"), "seeds.path": seeds.path, "dual_views": dual_views}


def evaluate_lineage(model: str, eval_set: DataSource, config: EvaluationConfig) -> Lineage:
    tags = _tags("evaluate", **{MODEL: model, EVAL_SET: eval_set.path})
    return tags, {**flatten(config, "evaluation"), "model": model, "eval_set.path": eval_set.path}


def dual_view_origin(path: str, storage_options: dict) -> dict[str, str]:
    """{synthesis_model, prompt_version} of a dual-views file, from its columns alone ('a,b' when it
    mixes several); {} when the file cannot be read (the training stage reports that itself)."""
    import pyarrow.parquet as pq

    from dualview_core.storage.filesystems import filesystem

    try:
        fs, inner = filesystem(path, storage_options)
        with fs.open(inner, "rb") as f:
            table = pq.read_table(f, columns=["model_id", "prompt_version"])
    except (OSError, ValueError, KeyError):
        return {}
    values = {column: ",".join(sorted({v for v in table.column(column).to_pylist() if v}))
              for column in ("model_id", "prompt_version")}
    return {SYNTHESIS_MODEL: values["model_id"] or None, PROMPT_VERSION: values["prompt_version"] or None}


# --- lifecycle ------------------------------------------------------------------------------------


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
