"""The trained model through MLflow's registry, against the production-shaped server (basic auth,
PostgreSQL, artifacts proxied to S3: tests/helpers/mlflow_auth.py).

A one-step checkpoint is registered by the stage the flows call (`register_trained`) with the suite's
headline numbers as version tags and the alias `candidate`; `dualview evaluate --model
models:/NAME@candidate`, logged in as the flow's user through the environment, then prints what
evaluating the checkpoint folder prints, as does the evaluate flow given `models:/NAME/1`; a name,
version or alias the registry lacks is one line and exit 2.
"""

from __future__ import annotations

import json

import pytest

from dualview_core.config import EvaluationConfig, MixtureConfig, PipelineConfig, TrainingConfig
from dualview_core.sample import followir_path
from flows.cli import main
from tests.helpers.mlflow_auth import mlflow_auth_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVALUATE = ["--eval-set", followir_path(), "--max-length", "64", "--resamples", "0"]
TINY = TrainingConfig(mixture=MixtureConfig(name="all-dv"), batch_size=2, max_steps=1, max_length=32, negatives=1)


@pytest.fixture(scope="module")
def server(s3_server, tmp_path_factory):
    with mlflow_auth_server(s3_server, tmp_path_factory.mktemp("mlflow-registry")) as started:
        yield started


@pytest.fixture
def logged_in(server, monkeypatch, tmp_path):
    """The flow's user through the environment (HOME moved: no ~/.mlflow/credentials stands in); the
    registry's cache in a folder of this test."""
    from tasks.tracking import registry

    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in server.client_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(registry, "REGISTRY_CACHE", tmp_path / "registered-models")
    return server


def cli(capsys, *argv) -> tuple[int, dict | None, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_a_registered_checkpoint_evaluates_by_alias_as_its_folder_does(logged_in, sample, tmp_path, capsys):
    from tasks.evaluation.runner import evaluate_task
    from tasks.stages import register_trained
    from tasks.tracking import mlflow_access as tracking
    from tasks.tracking.runs import REGISTERED_MODEL, RunRef
    from tasks.training.worker import run as train

    checkpoint = train(TINY, *sample, str(tmp_path / "checkpoint")).checkpoint
    uri = logged_in.uri
    config = PipelineConfig(training=TINY, tracking_uri=uri, artifact_location=None, register_alias="candidate")
    exp = tracking.experiment_id(uri, "it-registry", None)
    parent = RunRef(uri, exp, tracking.open_run(uri, exp, "it-registry-run"))
    report = evaluate_task(checkpoint, followir_path(), EvaluationConfig(max_length=64, bootstrap_resamples=0))
    registered = register_trained.fn(parent, config, checkpoint, report)
    tracking.close_run(uri, parent.run_id)

    name = "dualview-all-dv-minilm"
    assert (registered["name"], registered["version"], registered["alias"]) == (name, "1", "candidate")
    client = tracking.mlflow_client(uri)
    version = client.get_model_version_by_alias(name, "candidate")
    assert version.version == "1" and version.run_id == parent.run_id
    assert float(version.tags["sample/p-MRR"]) == pytest.approx(report.summary["sample/p-MRR"].mean)
    assert version.tags["dualview.mixture"] == "all-dv"
    assert client.get_run(parent.run_id).data.tags[REGISTERED_MODEL] == f"models:/{name}/1"

    capsys.readouterr()  # training's and registration's lines
    code, local, err = cli(capsys, "evaluate", "--model", checkpoint, *EVALUATE)
    assert code == 0, err
    import mlflow

    # something else in the process pointed MLflow's own registry URI elsewhere (a flow, another test):
    # the version's files still come from the server the CLI tracks to
    mlflow.set_registry_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    try:
        code, by_alias, err = cli(capsys, "evaluate", "--model", f"models:/{name}@candidate", *EVALUATE)
    finally:
        mlflow.set_registry_uri("")
    assert code == 0, err
    assert by_alias["registered_model"] == {"name": name, "version": "1"}
    assert by_alias["metrics"] == local["metrics"] and by_alias["tasks"] == local["tasks"]

    # the evaluate flow (what its deployment's form runs) takes the same URI
    from prefect.testing.utilities import prefect_test_harness

    from dualview_core.config.profiles import DataSourceOverrides, EvaluationOverrides
    from flows.evaluate import evaluate as evaluate_flow

    with prefect_test_harness(server_startup_timeout=120):  # a Prefect API for this flow run, stopped here
        flow_result = evaluate_flow(model=f"models:/{name}/1", eval_set=DataSourceOverrides(path=followir_path()),
                                    config=EvaluationOverrides(max_length=64, bootstrap_resamples=0), tracking_uri=uri,
                                    experiment="it-registry-evaluate", out=str(tmp_path / "flow-evaluations"))
    assert flow_result["metrics"] == local["metrics"]
    [flow_run] = client.search_runs([client.get_experiment_by_name("it-registry-evaluate").experiment_id],
                                    filter_string="tags.`dualview.run_kind` = 'evaluate'")  # not its stage run
    assert flow_run.data.tags["dualview.model"] == f"models:/{name}/1"
    capsys.readouterr()  # the flow's log lines

    # the flavor's files: a signature of strings to (n, 384) vectors, requirements pinned, the checkpoint's metadata
    import yaml

    (cached,) = (tmp_path / "registered-models").glob(f"*/{name}/1")
    mlmodel = yaml.safe_load((cached / "MLmodel").read_text())
    assert "sentence_transformers" in mlmodel["flavors"]
    assert json.loads(mlmodel["signature"]["inputs"]) == [{"type": "string", "required": True}]
    assert json.loads(mlmodel["signature"]["outputs"])[0]["tensor-spec"] == {"dtype": "float32", "shape": [-1, 384]}
    assert json.loads((cached / "input_example.json").read_text()) == [
        "wind power subsidies Only documents about subsidies in Europe after 2010 are relevant."]
    requirements = (cached / "requirements.txt").read_text().splitlines()
    assert {r.split("==")[0] for r in requirements} >= {"sentence-transformers", "torch", "transformers"}
    assert (cached / "model.sentence_transformer" / "dualview.json").is_file()

    for missing, what in ((f"models:/{name}@champion", "alias 'champion'"), (f"models:/{name}/7", "version 7"),
                          ("models:/nobody-registered-this/1", "version 1")):
        code, out, err = cli(capsys, "evaluate", "--model", missing, *EVALUATE)
        assert (code, out) == (2, None)
        assert err.startswith(f"dualview: error: {missing}: MLflow at {uri} has no registered model") and what in err
        assert err.count("\n") == 1 and logged_in.password not in err
