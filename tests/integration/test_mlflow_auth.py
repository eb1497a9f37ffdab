"""The project's tracking against MLflow as production runs it: basic auth, PostgreSQL stores,
artifacts proxied to S3 (tests/helpers/mlflow_auth.py starts it; moto stands in for S3).

A flow's user logs a run through `tasks.tracking.mlflow_access` and it lands in PostgreSQL and S3; a wrong
password or none is refused up front by `check_tracking_access`, in one line, the password nowhere.
"""

from __future__ import annotations

import time
import traceback

import pytest

from tasks.tracking import mlflow_access as tracking
from tasks.tracking.mlflow_access import TrackingAccessError, check_tracking_access
from tests.helpers.mlflow_auth import mlflow_auth_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# The server's default for new experiments, mlflow-artifacts:/<experiment id>. The auth app reads the
# experiment from the first segment of a proxied artifact path, so under a fixed root such as
# "mlflow-artifacts:/dualview" it finds none, falls back to default_permission (READ) and refuses a
# non-admin's upload with 403: only the experiment-id layout lets a flow's user write its artifacts.
ARTIFACT_LOCATION = None
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


@pytest.fixture(scope="module")
def server(s3_server, tmp_path_factory):
    with mlflow_auth_server(s3_server, tmp_path_factory.mktemp("mlflow-auth")) as started:
        yield started


@pytest.fixture
def login(server, monkeypatch, tmp_path):
    """Log in as `user` with `password` through the environment, as a flow-run pod does; None clears it.
    HOME moves so that no ~/.mlflow/credentials file stands in."""
    monkeypatch.setenv("HOME", str(tmp_path))

    def as_(user: str | None, password: str | None) -> None:
        for name, value in zip(CREDENTIALS, (user, password, None)):
            monkeypatch.setenv(name, value) if value else monkeypatch.delenv(name, raising=False)

    return as_


def test_a_flow_user_logs_a_run_into_postgres_and_its_artifact_into_s3(server, login, s3_server):
    import boto3
    import requests

    login(server.username, server.password)
    uri = server.uri
    check_tracking_access(uri)
    exp = tracking.experiment_id(uri, "it-auth", ARTIFACT_LOCATION)
    run_id = tracking.open_run(uri, exp, "it-auth-run", params={"synthesis.limit": "8"})
    tracking.log_metrics(uri, run_id, {"train/loss": 0.25}, step=1)
    tracking.log_dict(uri, run_id, {"dual_views": 3}, "synthesis/summary.json")
    tracking.close_run(uri, run_id)

    [(status, name)] = server.postgres.query("mlflow", "SELECT status, name FROM runs WHERE run_uuid = %s", (run_id,))
    assert (status, name) == ("FINISHED", "it-auth-run")
    assert server.postgres.query("mlflow", "SELECT value FROM params WHERE run_uuid = %s AND key = 'synthesis.limit'",
                                 (run_id,)) == [("8",)]
    assert server.postgres.query("mlflow", "SELECT value FROM metrics WHERE run_uuid = %s AND key = 'train/loss'",
                                 (run_id,)) == [(0.25,)]
    # the flow's own user, not an admin, created the experiment and so manages it (the auth app's grant)
    mine = requests.get(f"{uri}/api/3.0/mlflow/users/current/permissions", auth=(server.username, server.password),
                        timeout=60).json()
    assert not mine["is_admin"]
    assert any((p["resource_type"], p["resource_pattern"], p["permission"]) == ("experiment", exp, "MANAGE")
               for p in mine["permissions"]), mine
    assert server.postgres.query("mlflow_auth", "SELECT is_admin FROM users WHERE username = %s",
                                 (server.username,)) == [(False,)]  # the user store is PostgreSQL too

    bucket, prefix = server.artifacts.removeprefix("s3://").split("/", 1)
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    assert f"{prefix}/{exp}/{run_id}/artifacts/synthesis/summary.json" in keys, keys


def _refused(uri: str) -> tuple[TrackingAccessError, float]:
    start = time.monotonic()
    with pytest.raises(TrackingAccessError) as info:
        check_tracking_access(uri)
    return info.value, time.monotonic() - start


def test_a_wrong_password_is_refused_up_front_in_one_line(server, login, capfd, caplog):
    wrong = "not-the-password-of-flow-runner"
    login(server.username, wrong)
    error, seconds = _refused(server.uri)
    assert seconds < 10
    assert str(error) == (f"MLflow at {server.uri} rejected the credentials of user '{server.username}' (HTTP 401): "
                          "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) "
                          "to a valid account")
    out, err = capfd.readouterr()
    assert wrong not in "".join(traceback.format_exception(error)) + out + err + caplog.text + server.log.read_text()
    assert server.password not in "".join(traceback.format_exception(error))


def test_no_credentials_are_refused_up_front_in_one_line(server, login):
    login(None, None)
    error, seconds = _refused(server.uri)
    assert seconds < 10
    assert str(error) == (f"MLflow at {server.uri} asks for credentials and none are set (HTTP 401): "
                          "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)")
