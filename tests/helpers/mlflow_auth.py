"""The production MLflow server, shaped as infra/mlflow/mlflow.yaml runs it, on this machine for tests.

Owns two services started on 127.0.0.1 with free ports and stopped by their process ids:

- `postgres(root)`: a real PostgreSQL (Debian's binaries) with the role and the two databases the
  cluster's init script makes (`mlflow`, `mlflow_auth`); the role logs in over TCP with a password
  (scram), as MLflow's pod does with PGPASSWORD.
- `mlflow_auth_server(s3_endpoint, root)`: `mlflow server --app-name basic-auth` on that PostgreSQL,
  with the manifest's own basic_auth.ini (only its database_uri rewritten), the admin from
  MLFLOW_AUTH_ADMIN_* and the S3 endpoint from AWS_ENDPOINT_URL_S3 as the Secrets give them, and
  artifacts proxied to a fresh bucket on the given S3-compatible server. It creates a non-admin
  user for clients: flow runs log as their own user.

A client process needs only `MlflowAuthServer.client_env()` (MLFLOW_TRACKING_URI,
MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD): artifacts go through the server, so no S3 keys.
Must not know the project's tracking code; the tests drive that against these services.

PostgreSQL refuses to run as root. Run as root (CI, this machine), initdb and the server run as the
unprivileged `postgres` user (Debian's package makes it; `nobody` otherwise) through `setpriv`, which
execs in place — so the pid we hold is the server itself — and the data lives in a folder of its
own under /tmp, since pytest's tmp folders are closed to other users.
Without the binaries the tests skip with that reason on a developer's machine and fail in CI
(.ci/run installs Debian's postgresql).
"""

from __future__ import annotations

import configparser
import contextlib
import glob
import io
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.services import THROWAWAY_AWS, free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "infra" / "mlflow" / "mlflow.yaml"
ROLE = "dualview"  # POSTGRES_USER in infra/postgres/postgres.yaml
DATABASES = ("mlflow", "mlflow_auth")  # its init script's, for MLflow's two stores
PG_TOOLS = ("initdb", "postgres", "psql")
SERVER_ENV_DROPPED = ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
                      "MLFLOW_TRACKING_TOKEN", "PGPASSWORD", "MLFLOW_S3_ENDPOINT_URL")


def postgres_bin() -> Path:
    """The folder of PostgreSQL's server binaries: initdb's on PATH, else Debian's newest
    /usr/lib/postgresql/<version>/bin. Skips (fails in CI) when there is none."""
    candidates = [Path(p).resolve().parent for p in [shutil.which("initdb")] if p]
    candidates += sorted((Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    for folder in candidates:
        if all((folder / tool).is_file() for tool in PG_TOOLS):
            return folder
    message = "MLflow auth tests need PostgreSQL's server binaries (apt-get install postgresql)"
    pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)


def _unprivileged() -> tuple[list[str], pwd.struct_passwd | None]:
    """(command prefix, account) to run PostgreSQL's programs as someone other than root;
    ([], None) when this process is not root."""
    if os.geteuid() != 0:
        return [], None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            account = pwd.getpwnam(name)
            return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups", "--"], account
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Signal the process group of a service started with `start_new_session=True`; SIGKILL after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass(frozen=True)
class Postgres:
    """A running PostgreSQL; `uri(db)` carries no password (libpq reads PGPASSWORD), as in the manifests."""

    port: int
    user: str
    password: str
    host: str = "127.0.0.1"

    def uri(self, database: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def query(self, database: str, sql: str, params: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password, dbname=database,
                             connect_timeout=10) as conn:
            return conn.execute(sql, params).fetchall()


@contextlib.contextmanager
def postgres(root: Path) -> Iterator[Postgres]:
    """PostgreSQL on 127.0.0.1:<free port> with role `dualview` (a random password) owning the
    databases `mlflow` and `mlflow_auth`; its log is root/postgres.log."""
    bin_dir = postgres_bin()
    prefix, account = _unprivileged()
    home = Path(tempfile.mkdtemp(prefix="dualview-pg-"))  # short: the unix socket path has a 107-byte limit
    if account is not None:
        os.chown(home, account.pw_uid, account.pw_gid)
    data, port, password = home / "data", free_port(), secrets.token_urlsafe(16)
    proc = None
    try:
        # local (unix socket) connections trust the OS user, for the setup below; TCP asks for the password
        init = subprocess.run([*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                               "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"],
                              capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
        with open(root / "postgres.log", "wb") as log:
            proc = subprocess.Popen([*prefix, str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(home),
                                     "-h", "127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port(port, proc, timeout=60)
        sql = [f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}'", *(f"CREATE DATABASE {db} OWNER {ROLE}" for db in DATABASES)]
        _psql(bin_dir, home, port, sql)
        yield Postgres(port, ROLE, password)
    finally:
        if proc is not None:
            stop(proc, signal.SIGINT)  # "fast" shutdown: SIGTERM would wait for every client to leave
        shutil.rmtree(home, ignore_errors=True)


def _psql(bin_dir: Path, socket_dir: Path, port: int, statements: list[str], timeout: float = 30) -> None:
    """Run `statements` as the superuser over the unix socket, retrying while the server starts up."""
    cmd = [str(bin_dir / "psql"), "-h", str(socket_dir), "-p", str(port), "-U", "postgres", "-d", "postgres",
           "-v", "ON_ERROR_STOP=1", "-q", *(a for s in statements for a in ("-c", s))]
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode == 0:
            return
        if "starting up" not in out.stderr or time.monotonic() > deadline:
            raise RuntimeError(f"psql failed: {out.stderr.strip()}")
        time.sleep(0.2)


@dataclass(frozen=True)
class MlflowAuthServer:
    uri: str  # http://127.0.0.1:<port>
    username: str  # the non-admin user clients log as
    password: str
    admin_username: str
    admin_password: str
    postgres: Postgres
    artifacts: str  # s3://<bucket>/artifacts: the server's --artifacts-destination
    log: Path

    def client_env(self) -> dict[str, str]:
        """All a client process needs to log runs, artifacts included."""
        return {"MLFLOW_TRACKING_URI": self.uri, "MLFLOW_TRACKING_USERNAME": self.username,
                "MLFLOW_TRACKING_PASSWORD": self.password}


def production_auth_ini(database_uri: str) -> str:
    """The manifest's basic_auth.ini with its database_uri replaced."""
    import yaml

    docs = yaml.safe_load_all(MANIFEST.read_text())
    text = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "mlflow-auth")["data"]["basic_auth.ini"]
    ini = configparser.ConfigParser()
    ini.read_string(text)
    ini["mlflow"]["database_uri"] = database_uri
    out = io.StringIO()
    ini.write(out)
    return out.getvalue()


@contextlib.contextmanager
def mlflow_auth_server(s3_endpoint: str, root: Path, username: str = "flow-runner") -> Iterator[MlflowAuthServer]:
    """PostgreSQL, then `mlflow server --app-name basic-auth` on 127.0.0.1 with artifacts proxied to
    s3://mlflow-<random>/artifacts on `s3_endpoint` (created here); yields once the user `username`
    exists. Logs: root/postgres.log, root/mlflow.log."""
    root.mkdir(parents=True, exist_ok=True)
    bucket = f"mlflow-{uuid.uuid4().hex[:8]}"
    # the endpoint as the manifest's S3 Secret names it (boto3 reads AWS_ENDPOINT_URL_S3 itself)
    s3_env = {**THROWAWAY_AWS, "AWS_ENDPOINT_URL_S3": s3_endpoint}
    _make_bucket(s3_endpoint, bucket)
    with postgres(root) as pg:
        (root / "basic_auth.ini").write_text(production_auth_ini(pg.uri("mlflow_auth")))
        admin, admin_password = "admin", secrets.token_urlsafe(16)
        env = {k: v for k, v in os.environ.items() if k not in SERVER_ENV_DROPPED} | s3_env | {
            "MLFLOW_AUTH_CONFIG_PATH": str(root / "basic_auth.ini"), "PGPASSWORD": pg.password,
            "MLFLOW_AUTH_ADMIN_USERNAME": admin, "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
            # MLflow's GenAI job runner (huey: online scoring, trace archival) is no part of what we
            # test; it starts a minute in, costs a busy 2-core machine CPU and took 15 s to stop
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        port = free_port()
        cmd = [str(Path(sys.executable).parent / "mlflow"), "server", "--app-name", "basic-auth", "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1", "--backend-store-uri", pg.uri("mlflow"),
               "--serve-artifacts", "--artifacts-destination", f"s3://{bucket}/artifacts"]
        with open(root / "mlflow.log", "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
        try:
            uri = f"http://127.0.0.1:{port}"
            wait_for_port(port, proc, timeout=180)
            _wait_healthy(uri, proc)
            password = secrets.token_urlsafe(16)
            _create_user(uri, (admin, admin_password), username, password)
            yield MlflowAuthServer(uri, username, password, admin, admin_password, pg, f"s3://{bucket}/artifacts",
                                   root / "mlflow.log")
        finally:
            stop(proc)


def _make_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name=THROWAWAY_AWS["AWS_DEFAULT_REGION"],
                 aws_access_key_id=THROWAWAY_AWS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=THROWAWAY_AWS["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=bucket)


def _wait_healthy(uri: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """/health is open under basic auth (the manifest's probes use it); 200 once the app is up."""
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"{uri}/health", timeout=5).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{uri}/health not OK after {timeout}s")


def _create_user(uri: str, admin: tuple[str, str], username: str, password: str) -> None:
    """Through the auth app's REST API, as an admin would (MLflow wants 12+ character passwords)."""
    import requests

    r = requests.post(f"{uri}/api/2.0/mlflow/users/create", json={"username": username, "password": password},
                      auth=admin, timeout=30)
    if r.status_code != 200:
        raise RuntimeError(f"creating MLflow user {username!r} failed: HTTP {r.status_code} {r.text[:300]}")
