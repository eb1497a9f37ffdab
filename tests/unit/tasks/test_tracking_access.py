"""The up-front credential check of an MLflow tracking server: its one-line messages, against a
hand-made server that answers like MLflow's basic-auth app, and where flows call it.
(The real server on PostgreSQL and S3: tests/integration/test_mlflow_auth.py.)"""

from __future__ import annotations

import base64
import doctest
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasks.tracking import mlflow_access as tracking
from tasks.tracking.mlflow_access import TrackingAccessError, check_tracking_access, refusal_message, unreachable_message

URI = "http://127.0.0.1:5000"
SECRET = "hunter2-hunter2"
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def test_doctests():
    assert doctest.testmod(tracking).failed == 0


def test_a_rejected_password_names_the_user_and_the_variables_not_the_password():
    line = refusal_message(URI, 401, "alice", has_password=True, has_token=False)
    assert line == ("MLflow at http://127.0.0.1:5000 rejected the credentials of user 'alice' (HTTP 401): set "
                    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) to a valid account")


def test_each_refusal_is_one_line_saying_what_to_set():
    cases = {(401, None, False, False): "asks for credentials and none are set",
             (401, "alice", False, False): "MLFLOW_TRACKING_USERNAME is set to 'alice' but MLFLOW_TRACKING_PASSWORD is not",
             (401, None, False, True): "rejected the credentials of the token in MLFLOW_TRACKING_TOKEN",
             (403, "alice", True, False): "denies user 'alice' access (HTTP 403)"}
    for (status, user, has_password, has_token), expected in cases.items():
        line = refusal_message(URI, status, user, has_password, has_token)
        assert expected in line and "\n" not in line and line.startswith(f"MLflow at {URI} ")
        assert "MLFLOW_TRACKING_PASSWORD" in line


def test_credentials_in_the_uri_never_reach_the_message():
    line = refusal_message(f"http://alice:{SECRET}@mlflow:5000", 401, "alice", True, False)
    assert SECRET not in line and "MLflow at http://mlflow:5000 " in line


def test_unreachable_names_the_innermost_cause():
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as exc:
            raise RuntimeError("HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded\nwith url") from exc
    except RuntimeError as outer:
        line = unreachable_message("http://127.0.0.1:1", outer)
    assert line == "cannot reach MLflow at http://127.0.0.1:1: Connection refused (is the server up and the tracking URI right?)"


def test_local_stores_are_not_checked():
    for uri in ("sqlite:///.cache/mlflow/mlflow.db", "file:///tmp/mlruns", "/tmp/mlruns"):
        assert check_tracking_access(uri) is None


REQUESTS: list[str] = []  # the path of every request the hand-made server below answered


class _BasicAuth(BaseHTTPRequestHandler):
    """MLflow's basic-auth app in miniature: 401 unless the request carries alice's password."""

    def do_GET(self):
        REQUESTS.append(self.path)
        good = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
        ok = self.headers.get("Authorization") == good
        body = b'{"experiments": []}' if ok else b"You are not authenticated."
        self.send_response(200 if ok else 401)
        if not ok:
            self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def auth_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BasicAuth)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def credentials(monkeypatch, tmp_path):
    """Set (user, password) in the environment; no ~/.mlflow/credentials file behind them."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)

    def set_to(user: str | None, password: str | None) -> None:
        for name, value in zip(CREDENTIALS, (user, password)):
            monkeypatch.setenv(name, value) if value else monkeypatch.delenv(name, raising=False)

    return set_to


def test_the_right_password_passes(auth_server, credentials):
    credentials("alice", SECRET)
    check_tracking_access(auth_server)


@pytest.mark.parametrize("user, password, expected", [
    ("alice", "wrong-password-1234", "rejected the credentials of user 'alice' (HTTP 401)"),
    (None, None, "asks for credentials and none are set (HTTP 401)"),
])
def test_a_refused_login_fails_at_once_in_one_line(auth_server, credentials, capfd, caplog, user, password, expected):
    credentials(user, password)
    before = len(REQUESTS)
    with pytest.raises(TrackingAccessError) as info:
        check_tracking_access(auth_server)
    assert len(REQUESTS) - before == 1  # at once: one request, the refusal is not retried
    assert str(info.value) == str(info.value).strip() and "\n" not in str(info.value)
    assert expected in str(info.value) and auth_server in str(info.value)
    if password:
        out, err = capfd.readouterr()
        assert password not in str(info.value) + out + err + caplog.text


def test_no_server_fails_at_once_in_one_line(credentials, monkeypatch):
    from urllib3.util import connection

    credentials("alice", SECRET)
    connects, connect = [], connection.create_connection

    def counted(address, *args, **kwargs):  # every TCP connection urllib3 (under requests, under MLflow) opens
        connects.append(f"{address[0]}:{address[1]}")
        return connect(address, *args, **kwargs)

    monkeypatch.setattr(connection, "create_connection", counted)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(TrackingAccessError, match=r"^cannot reach MLflow at .*: Connection refused \(") as info:
        check_tracking_access(uri)
    assert connects == [uri.removeprefix("http://")]  # at once: one connection attempt, not retried
    assert SECRET not in str(info.value)


def test_every_flow_run_is_checked_before_its_run_opens(monkeypatch):
    from tasks.tracking import runs

    opened = []
    monkeypatch.setattr(runs, "open_flow_run", lambda *args: opened.append(args))

    def refuse(uri):
        raise TrackingAccessError(f"MLflow at {uri} refused")

    monkeypatch.setattr(tracking, "check_tracking_access", refuse)
    with pytest.raises(TrackingAccessError, match="refused"):
        with runs.flow_run_tracked("exp", URI, None, "run", {}, {}):
            pass
    assert opened == []
