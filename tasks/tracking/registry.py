"""The trained model as an MLflow model in the registry, and a `models:/` URI back to a local folder.

Owns both directions:

- **log and register**: a checkpoint folder is written in MLflow's `sentence_transformers` flavor
  (MLmodel, a signature of query ⊕ instruction strings to unit vectors, an input example, pip
  requirements pinned to the installed sentence-transformers, torch and transformers, the
  sentence-transformers folder under `model.sentence_transformer` with the checkpoint's own
  `dualview.json`), logged as a LoggedModel of a run, registered as a new version of a name with the
  caller's tags, and an alias moved to it when asked;
- **resolve**: `models:/NAME/VERSION` or `models:/NAME@ALIAS` becomes a local folder `load_model`
  reads: the version's artifacts downloaded once into the project's cache (a version's files never
  change), under the tracking server's digest so two servers' `NAME/1` never meet.

Everything goes through `MlflowClient` by id, as in the rest of tasks.tracking: the flavor's
`log_model` logs through MLflow's process-wide tracking URI and active run (`Model.log`), which a stage
running in a Prefect worker thread must not set, so the flavor's own `save_model` writes the folder and
the client does the rest of what `Model.log` does (create the LoggedModel, upload, link, register).
Must not know stages or evaluation: it gets a checkpoint folder, a run and strings to tag with.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dualview_core.keys import digest
from dualview_core.method.texts import QUERY_TEMPLATE, query_text
from dualview_core.storage.filesystems import SourceError
from dualview_core.storage.layout import PROJECT_CACHE
from tasks.tracking.mlflow_access import check_tracking_access, mlflow_client, mlflow_name, public_uri

# the packages that load and run the model; pinned to this environment's versions (see `pip_requirements`)
MODEL_PACKAGES = ("sentence-transformers", "torch", "transformers")
ARTIFACT_NAME = "model"  # the LoggedModel's name: `models:/<model id>` holds MLmodel and the folder below
ST_FOLDER = "model.sentence_transformer"  # where the flavor keeps the sentence-transformers folder (its save_model)
CHECKPOINT_EXTRAS = ("dualview.json",)  # what the checkpoint has that SentenceTransformer.save does not write
REGISTRY_CACHE = PROJECT_CACHE / "registered-models"
# an example of what the model reads: one query ⊕ instruction string (dualview_core.method.texts)
EXAMPLE_QUERY = ("wind power subsidies", "Only documents about subsidies in Europe after 2010 are relevant.")
# the registry's answers that say "there is no such thing"; behind basic auth an unknown name is a 403
# (the auth app refuses a name it holds no permission record for), as it is for a model this login may not read
NOT_FOUND_CODES = ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND", "INVALID_PARAMETER_VALUE")
DENIED_CODES = ("PERMISSION_DENIED",)

_MODELS_URI = re.compile(r"^models:/(?P<name>[^/@:]+)(?:/(?P<version>\d+)|@(?P<alias>[\w-]+))$")


class RegistryError(SourceError):
    """A `models:/` URI that names nothing the registry has, or is not of a form we resolve. One line."""


@dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    model_id: str | None = None

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


def is_models_uri(model: str) -> bool:
    return model.startswith("models:/")


def parse_models_uri(uri: str) -> tuple[str, str | None, str | None]:
    """(name, version, alias) of a registered model URI; exactly one of version and alias is set.

        >>> parse_models_uri("models:/dualview-all-dv-minilm/3"), parse_models_uri("models:/m@candidate")
        (('dualview-all-dv-minilm', '3', None), ('m', None, 'candidate'))
    """
    found = _MODELS_URI.match(uri)
    if found is None:
        raise RegistryError(f"{uri}: not a registered model URI (models:/NAME/VERSION or models:/NAME@ALIAS)")
    return found["name"], found["version"], found["alias"]


def pip_requirements(packages: Iterable[str] = MODEL_PACKAGES) -> list[str]:
    """`name==version` of each installed package, the version's public part: a CPU wheel's `+cpu` is a
    build of the same release, and no index serves it under that name."""
    from importlib.metadata import version

    return [f"{name}=={version(name).partition('+')[0]}" for name in packages]  # PEP 440: a local label follows '+'


def version_tags(metrics: Mapping[str, float], keys: Iterable[str]) -> dict[str, str]:
    """The numbers of `keys` (with their `_ci_low` / `_ci_high` when present) as model-version tags,
    named as MLflow names the metrics, the value as MLflow would show it.

        >>> version_tags({"sample/p-MRR": 3.5, "sample/p-MRR_ci_low": 1.0, "other": 2.0}, ["sample/p-MRR"])
        {'sample/p-MRR': '3.5', 'sample/p-MRR_ci_low': '1.0'}
    """
    out = {}
    for key in keys:
        for name in (key, f"{key}_ci_low", f"{key}_ci_high"):
            if name in metrics:
                out[mlflow_name(name)] = repr(float(metrics[name]))
    return out


# --- log and register ---------------------------------------------------------------------------------


def save_flavor(checkpoint: str, path: str, query_template: str = QUERY_TEMPLATE, mlflow_model=None) -> None:
    """Write `checkpoint` (a local sentence-transformers folder) to `path` in the sentence_transformers
    flavor, its `dualview.json` carried along (`load_model` reads it for the checkpoint's remote code)."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.sentence_transformers import save_model
    from mlflow.types import ColSpec, Schema, TensorSpec

    from dualview_core.model import load_model

    model = load_model(checkpoint)
    dim = model.get_embedding_dimension()
    signature = ModelSignature(inputs=Schema([ColSpec("string")]),
                               outputs=Schema([TensorSpec(np.dtype("float32"), (-1, dim))]))  # (texts, dim)
    save_model(model, path, signature=signature, input_example=[query_text(*EXAMPLE_QUERY, template=query_template)],
               pip_requirements=pip_requirements(), mlflow_model=mlflow_model)
    for name in CHECKPOINT_EXTRAS:
        if (Path(checkpoint) / name).is_file():
            shutil.copy2(Path(checkpoint) / name, Path(path) / ST_FOLDER / name)


def log_and_register(tracking_uri: str, experiment_id: str, run_id: str, checkpoint: str, name: str, *,
                     query_template: str = QUERY_TEMPLATE, tags: Mapping[str, str] | None = None,
                     alias: str | None = None) -> RegisteredVersion:
    """Log `checkpoint` as an MLflow model of run `run_id` and register it as a new version of `name`
    (created on first use) tagged with `tags`; move `alias` to that version when given."""
    import tempfile

    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.exceptions import MlflowException
    from mlflow.models import Model

    client = mlflow_client(tracking_uri)
    logged = client.create_logged_model(experiment_id, name=ARTIFACT_NAME, source_run_id=run_id,
                                        model_type="sentence-transformers")
    with tempfile.TemporaryDirectory(prefix="dualview-mlflow-model-") as tmp:
        local = os.path.join(tmp, ARTIFACT_NAME)
        described = Model(artifact_path=logged.artifact_location, model_uuid=logged.model_id, run_id=run_id,
                          model_id=logged.model_id)
        save_flavor(checkpoint, local, query_template, described)
        client.log_model_artifacts(logged.model_id, local)
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    # the source is the logged model's own location, not its models:/ URI: a local (SQL) registry store
    # would resolve that URI through MLflow's process-wide tracking URI, which need not be this one
    version = client.create_model_version(name, logged.artifact_location, run_id=run_id,
                                          tags={k: str(v) for k, v in (tags or {}).items()}, model_id=logged.model_id)
    if alias:
        client.set_registered_model_alias(name, alias, version.version)
    return RegisteredVersion(name, str(version.version), logged.model_id)


# --- resolve ------------------------------------------------------------------------------------------


def find_version(uri: str, tracking_uri: str) -> RegisteredVersion:
    """The version `uri` names now (an alias moves; the version it pointed at when asked is the one used)."""
    from mlflow.exceptions import MlflowException

    name, number, alias = parse_models_uri(uri)
    check_tracking_access(tracking_uri)
    client = mlflow_client(tracking_uri)
    try:
        found = client.get_model_version(name, number) if number else client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code not in NOT_FOUND_CODES + DENIED_CODES:
            raise
        what = f"version {number}" if number else f"alias '{alias}'"
        readable = " this login may read" if exc.error_code in DENIED_CODES else ""
        raise RegistryError(f"{uri}: MLflow at {public_uri(tracking_uri)} has no registered model '{name}' with "
                            f"{what}{readable}") from None
    return RegisteredVersion(found.name, str(found.version), getattr(found, "model_id", None))


def cache_folder(tracking_uri: str, version: RegisteredVersion, root: Path | None = None) -> Path:
    """Where a version's artifacts are kept (under `root`, default REGISTRY_CACHE): per tracking server,
    whose credentials are never part of the name."""
    server = digest(public_uri(tracking_uri).encode(), size=6)
    return (root or REGISTRY_CACHE) / server / version.name / version.version


def artifact_location(tracking_uri: str, version: RegisteredVersion) -> str:
    """Where the version's files are, asked of `tracking_uri` itself. MLflow's own `models:/` download
    looks the name up in the process-wide registry URI, which another caller in the same process (a
    flow, a test) may have pointed elsewhere; a location read through our client cannot go astray."""
    client = mlflow_client(tracking_uri)
    if version.model_id:  # a version of a logged model: its files are the logged model's
        return client.get_logged_model(version.model_id).artifact_location
    return client.get_model_version_download_uri(version.name, version.version)


def fetch_registered(uri: str, tracking_uri: str, root: Path | None = None) -> tuple[str, RegisteredVersion]:
    """(the local sentence-transformers folder of `uri`, the version it named). Downloads on first use into
    a folder of its own and renames it into place, so an interrupted download is never taken for one."""
    from mlflow.artifacts import download_artifacts

    version = find_version(uri, tracking_uri)
    target = cache_folder(tracking_uri, version, root)
    if not (target / ST_FOLDER).is_dir():
        shutil.rmtree(target, ignore_errors=True)  # what a failed copy of an older release left, if anything
        partial = target.with_name(f"{target.name}.partial-{uuid.uuid4().hex[:8]}")
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the CLI's stdout is its JSON
                got = Path(download_artifacts(artifact_uri=artifact_location(tracking_uri, version),
                                              dst_path=str(partial), tracking_uri=tracking_uri, registry_uri=tracking_uri))
            if not (got / ST_FOLDER).is_dir():
                raise RegistryError(f"{uri}: version {version.version} of '{version.name}' is not a "
                                    f"sentence-transformers model (no {ST_FOLDER} in its artifacts)")
            with contextlib.suppress(OSError):  # another process may have put the same files in place first
                got.replace(target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return str(target / ST_FOLDER), version
