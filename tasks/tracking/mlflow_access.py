"""MLflow for pipelines: one experiment per pipeline name, a parent run, a nested run per stage.

Runs are addressed by id, through `MlflowClient` (never MLflow's process-wide tracking URI or its
thread-local "active run"), so a stage can log from whichever thread or process Prefect runs it in.

Params are the flattened config with anything secret-looking removed (keys naming a key, secret,
token, password or credential, and the whole of storage options but the endpoint); credentials come
from the environment and never reach MLflow.

Before a flow logs to an MLflow *server* (http/https), `check_tracking_access` asks it once whether
it takes this process's credentials (MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN), so
a refused login fails the run in a second with one line — not after hours of synthesis, on the first
metric. SQLite and file stores are not checked.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel

from dualview_core.config import is_secret_name
from dualview_core.storage.layout import PROJECT_ROOT

PUBLIC_STORAGE_OPTIONS = ("endpoint_url",)
MAX_PARAM_CHARS = 500


def flatten(value: object, prefix: str = "") -> dict[str, str]:
    """{'synthesis.vllm.model': 'smollm2', ...} with secrets removed and long values cut."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    out: dict[str, str] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            key = str(key)
            if is_secret_name(key):
                continue
            if key == "storage_options":
                item = _public_storage_options(item)
            out.update(flatten(item, f"{prefix}.{key}" if prefix else key))
        return out
    text = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return {prefix: text[:MAX_PARAM_CHARS]}


def _public_storage_options(options: object) -> dict:
    if not isinstance(options, Mapping):
        return {}
    client = options.get("client_kwargs") if isinstance(options.get("client_kwargs"), Mapping) else {}
    return {k: v for k, v in {**options, **client}.items() if k in PUBLIC_STORAGE_OPTIONS}


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


# --- does the tracking server take our credentials? -------------------------------------------------

CREDENTIAL_VARIABLES = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
# The probe asks for an experiment no one has: the server checks the login first, then answers 404.
# Cheap on purpose — a search, which basic auth filters experiment by experiment for a non-admin,
# costs the server work for every experiment it holds; a lookup by name costs one, however many it
# holds (benchmarks/README.md).
ACCESS_PROBE = "/api/2.0/mlflow/experiments/get-by-name"
ACCESS_TIMEOUT_S = 30.0  # for an answer at all: a refusal is one lookup, far quicker than this


class TrackingAccessError(RuntimeError):
    """The MLflow server refuses this process's credentials, or cannot be reached. One line, no secret."""


def is_tracking_server(tracking_uri: str) -> bool:
    """
    >>> is_tracking_server("https://mlflow.dualview:5000"), is_tracking_server("sqlite:///.cache/mlflow/mlflow.db")
    (True, False)
    """
    return urlsplit(tracking_uri).scheme in ("http", "https")


def public_uri(uri: str) -> str:
    """The URI without any user:password@ part.

    >>> public_uri("http://alice:s3cret@mlflow:5000/x")
    'http://mlflow:5000/x'
    """
    parts = urlsplit(uri)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def refusal_message(tracking_uri: str, status: int, username: str | None, has_password: bool, has_token: bool) -> str:
    """The one line for an HTTP 401/403 from the server; names the user, never the password."""
    where = f"MLflow at {public_uri(tracking_uri)}"
    if username and not has_password and not has_token:  # MLflow sends no login without both
        return (f"{where} refused the request (HTTP {status}): MLFLOW_TRACKING_USERNAME is set to '{username}' "
                "but MLFLOW_TRACKING_PASSWORD is not; set both")
    if not username and not has_token:
        return f"{where} asks for credentials and none are set (HTTP {status}): set {CREDENTIAL_VARIABLES}"
    who = f"user '{username}'" if username and has_password else "the token in MLFLOW_TRACKING_TOKEN"
    if status == 403:
        return f"{where} denies {who} access (HTTP 403): set {CREDENTIAL_VARIABLES} to an account allowed there"
    return f"{where} rejected the credentials of {who} (HTTP {status}): set {CREDENTIAL_VARIABLES} to a valid account"


def unreachable_message(tracking_uri: str, error: BaseException) -> str:
    """The one line for a server that did not answer: the innermost cause (e.g. 'Connection refused')."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        error = inner
        seen.add(id(error))
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
    reason = " ".join(reason.split())[:200]
    return f"cannot reach MLflow at {public_uri(tracking_uri)}: {reason} (is the server up and the tracking URI right?)"


def check_tracking_access(tracking_uri: str, timeout: float = ACCESS_TIMEOUT_S) -> None:
    """Raise `TrackingAccessError` unless the MLflow server at `tracking_uri` answers this process's
    credentials (read as MLflow itself reads them) with something other than 401/403. One request,
    no retries; SQLite and file URIs return at once. Any other answer (the 404 for the made-up
    experiment) means the login was accepted."""
    if not is_tracking_server(tracking_uri):
        return
    from mlflow.exceptions import MlflowException
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    creds = get_default_host_creds(tracking_uri)
    try:
        response = http_request(creds, ACCESS_PROBE, "GET", max_retries=0, timeout=timeout,
                                params={"experiment_name": f"dualview-access-check-{uuid.uuid4().hex}"})
    except MlflowException as exc:  # MLflow wraps connection errors and timeouts in it
        raise TrackingAccessError(unreachable_message(tracking_uri, exc)) from None
    if response.status_code in (401, 403):
        raise TrackingAccessError(refusal_message(tracking_uri, response.status_code, creds.username,
                                                  bool(creds.password), bool(creds.token)))


def mlflow_client(tracking_uri: str):
    """A client of `tracking_uri` for runs and the model registry alike: never MLflow's process-wide
    URIs, which another caller in the same process may have pointed elsewhere."""
    from mlflow.tracking import MlflowClient

    if tracking_uri.startswith("sqlite:///") and not tracking_uri.startswith("sqlite:////"):
        Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


# MLflow 3's UI opens an experiment by its kind; without this tag it may guess "GenAI" and hide the run table
EXPERIMENT_KIND, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"


def experiment_id(tracking_uri: str, name: str, artifact_location: str | None = None) -> str:
    """The experiment `name` (created when missing), marked as a model-training experiment."""
    client = mlflow_client(tracking_uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.tags.get(EXPERIMENT_KIND) is None:  # made by an older version: mark it once
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)
        return found.experiment_id
    return client.create_experiment(name, artifact_location=artifact_root(artifact_location),
                                    tags={EXPERIMENT_KIND: MODEL_TRAINING})


def artifact_root(location: str | None) -> str | None:
    """An experiment's artifact location for MLflow: a local folder as a file URI, a URI as it is —
    "mlflow-artifacts:/dualview" too, which has no "//" but names the server's proxied store.

    >>> artifact_root("mlflow-artifacts:/dualview"), artifact_root("s3://bucket/mlflow"), artifact_root("/tmp/mlruns")
    ('mlflow-artifacts:/dualview', 's3://bucket/mlflow', 'file:///tmp/mlruns')
    """
    if location and not urlsplit(location).scheme:
        return Path(location).resolve().as_uri()
    return location


def open_run(tracking_uri: str, experiment: str, name: str, *, parent: str | None = None,
             tags: Mapping[str, str] | None = None, params: Mapping[str, str] | None = None) -> str:
    """Create a run (nested under `parent` if given); return its id. Close it with `close_run`."""
    client = mlflow_client(tracking_uri)
    all_tags = {"mlflow.runName": name, **({"mlflow.parentRunId": parent} if parent else {}), **(tags or {})}
    run = client.create_run(experiment, run_name=name, tags={k: str(v) for k, v in all_tags.items() if v is not None})
    if params:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            client.log_batch(run.info.run_id, params=items[start : start + 100])
    return run.info.run_id


FLOW_RUN_TAG = "dualview.prefect_flow_run_id"


def reopen_run(tracking_uri: str, experiment: str, flow_run_id: str) -> str | None:
    """The parent run an earlier attempt of this Prefect flow run opened, set RUNNING again; None
    when there is none. A retried flow run so continues its MLflow run — and, since outputs are
    named after that run, its training resumes from the state the failed attempt saved."""
    return _reopen(tracking_uri, experiment, f"tags.`{FLOW_RUN_TAG}` = '{flow_run_id}'")


def reopen_child(tracking_uri: str, experiment: str, parent: str, name: str) -> str | None:
    """A stage run `name` under `parent` that an earlier attempt left unfinished (failed, killed or
    still marked running), set RUNNING again: a resumed training stage logs on into the same curves.
    A stage that finished is not reopened — running it again is a new execution with its own numbers."""
    return _reopen(tracking_uri, experiment, f"tags.`mlflow.parentRunId` = '{parent}' AND "
                   f"tags.`mlflow.runName` = '{name}'", keep=lambda run: run.info.status != "FINISHED")


def _reopen(tracking_uri: str, experiment: str, filter_string: str, keep=lambda run: True) -> str | None:
    """The newest run matching the filter that `keep` accepts, set RUNNING again (MLflow's search
    has no OR, so the status test is done here)."""
    client = mlflow_client(tracking_uri)
    found = [r for r in client.search_runs([experiment], filter_string=filter_string,
                                           order_by=["attributes.start_time DESC"], max_results=50) if keep(r)]
    if not found:
        return None
    run_id = found[0].info.run_id
    client.update_run(run_id, status="RUNNING")
    return run_id


def close_run(tracking_uri: str, run_id: str, failed: bool = False) -> None:
    mlflow_client(tracking_uri).set_terminated(run_id, status="FAILED" if failed else "FINISHED")


def mlflow_name(key: str) -> str:
    """A metric's name as MLflow accepts it: MLflow allows letters, digits, `_ - . : /` and spaces, so
    the `@` of the benchmarks' own names is spelled out (`mair/ifeval/ndcg@10` -> `mair/ifeval/ndcg_at_10`).

        >>> mlflow_name("mair/ifeval/ndcg@10_ci_low")
        'mair/ifeval/ndcg_at_10_ci_low'
    """
    return key.replace("@", "_at_")


def log_metrics(tracking_uri: str, run_id: str, metrics: Mapping[str, float], step: int | None = None) -> None:
    """Log `metrics` on a run, their names as `mlflow_name` spells them."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(mlflow_name(k), float(v), now, step or 0) for k, v in metrics.items() if v is not None]
    if items:
        mlflow_client(tracking_uri).log_batch(run_id, metrics=items)


def dataset(source: str, name: str, digest: str):
    """An MLflow dataset that is only a reference (source, name, content digest): lineage without
    reading the data."""
    import warnings

    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    with warnings.catch_warnings():  # a local path "can be interpreted in multiple ways": harmless
        warnings.simplefilter("ignore", UserWarning)
        return MetaDataset(resolve_dataset_source(source), name=name, digest=digest)


def log_datasets(tracking_uri: str, run_id: str, datasets: list[tuple[str, str, str, str]]) -> None:
    """Each (name, source, digest, context) as a dataset input of the run; context is 'synthesis',
    'training' or 'eval'."""
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    inputs = [DatasetInput(dataset(source, name, digest)._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])
              for name, source, digest, context in datasets]
    mlflow_client(tracking_uri).log_inputs(run_id, datasets=inputs)


def log_dict(tracking_uri: str, run_id: str, obj: object, path: str) -> None:
    mlflow_client(tracking_uri).log_dict(run_id, obj, path)


def synthesis_metrics(summary: Mapping) -> dict[str, float]:
    """The numbers of a synthesis run, named for MLflow."""
    cost, plan = summary["cost"], summary["plan"]
    out = {f"synthesis/{k}": v for k, v in cost.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out |= {f"synthesis/rejections/{reason}": n for reason, n in cost["rejections"].items()}
    out |= {f"synthesis/plan/{k}": v for k, v in plan.items()}
    out |= {"synthesis/dual_views": summary["dual_views"], "synthesis/rejected": summary["rejected"],
            "synthesis/quarantined_seeds": summary["seeds"]["quarantined"]}
    if outcomes := summary.get("outcomes"):  # over all current seeds, cached answers included
        out |= {f"synthesis/outcomes/{reason}": n for reason, n in outcomes["by_reason"].items()}
        out |= {f"synthesis/guards/{reason}": n for reason, n in outcomes.get("guard_verdicts", {}).items()}
    return out
