"""The training Job and the MLflow server: their command lines parsed by the real CLIs (dualview's
argparse, MLflow's click command), and the training values checked against the typed config they
must not drift from (GPU count = ranks, ZeRO stage, bf16, model)."""

from __future__ import annotations

import configparser
import re

import pytest

from dualview_core.config import cluster
from dualview_core.training.ds_config import deepspeed_config, precision
from tests.helpers.infra import CFG, INFRA, find, load_objects

JOB = load_objects(INFRA / "training" / "train-job.yaml")[0]
TRAINER = JOB["spec"]["template"]["spec"]["containers"][0]


def job_config():
    from flows.cli import build_parser
    from flows.commands.train_cli import config_from_args

    assert TRAINER["command"] == ["dualview"]
    args = build_parser().parse_args(TRAINER["args"])
    return args, config_from_args(args)


def test_the_job_runs_the_trainer_image_with_one_rank_per_gpu():
    args, _ = job_config()
    assert TRAINER["image"] == cluster.image(CFG, "trainer")
    assert args.processes == CFG.trainer_gpus == TRAINER["resources"]["limits"]["nvidia.com/gpu"]
    assert args.processes > 1, "more than one rank: `dualview train` then runs the deepspeed launcher"


def test_the_jobs_training_config_is_the_clusters():
    _, cfg = job_config()
    for field in ("zero_stage", "model", "pooling"):
        assert getattr(cfg, field) == getattr(CFG.training, field), field
    # bf16: the CLI leaves precision at auto, which means bf16 on CUDA, as the cluster config says
    assert precision(cfg, "cuda") == precision(CFG.training, "cuda") == "bf16"


def test_the_deepspeed_config_the_ranks_get():
    _, cfg = job_config()
    ds = deepspeed_config(cfg, world_size=CFG.trainer_gpus, total_steps=1000, device="cuda")
    assert ds["zero_optimization"]["stage"] == CFG.training.zero_stage == 2
    assert ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
    assert ds["train_batch_size"] == cfg.batch_size * cfg.grad_accumulation * CFG.trainer_gpus


def test_a_drifted_zero_stage_would_be_caught():
    from flows.cli import build_parser
    from flows.commands.train_cli import config_from_args

    args = list(TRAINER["args"])
    args[args.index("--zero-stage") + 1] = "3"
    assert config_from_args(build_parser().parse_args(args)).zero_stage != CFG.training.zero_stage


def test_the_prefect_train_deployment_gets_the_same_gpus_and_image():
    jv = cluster.job_variables(CFG)["train"]
    assert jv["gpus"] == CFG.trainer_gpus and jv["image"] == TRAINER["image"]
    assert jv["node_selector"] == JOB["spec"]["template"]["spec"]["nodeSelector"]


def test_the_job_is_a_run_not_standing_infrastructure():
    assert "generateName" in JOB["metadata"] and "name" not in JOB["metadata"]


def test_a_restarted_pod_resumes_instead_of_starting_over():
    args, cfg = job_config()
    assert JOB["spec"]["backoffLimit"] > 0 and cfg.save_every > 0
    assert args.out.startswith("s3://"), "every rank, on any node, must reach <out>.state"


# --- MLflow ------------------------------------------------------------------------------------------

MLFLOW = find("Deployment", "mlflow")["spec"]["template"]["spec"]
SERVER = MLFLOW["containers"][0]


@pytest.mark.slow  # imports mlflow's CLI (~3 s)
def test_mlflow_server_args_parse_with_the_pinned_mlflow():
    from mlflow.cli import server

    assert SERVER["args"][0] == "server"
    params = server.make_context("server", list(SERVER["args"][1:])).params
    assert params["app_name"] == "basic-auth"
    assert params["serve_artifacts"] and params["artifacts_destination"].startswith("s3://")
    assert params["backend_store_uri"].startswith("postgresql://")
    assert int(params["port"]) == cluster.MLFLOW_PORT


def test_mlflow_uris_carry_no_password_and_auth_reads_the_mounted_ini():
    env = {e["name"]: e for e in SERVER["env"]}
    args = SERVER["args"]
    ini_text = find("ConfigMap", "mlflow-auth")["data"]["basic_auth.ini"]
    ini = configparser.ConfigParser()
    ini.read_string(ini_text)
    for uri in (args[args.index("--backend-store-uri") + 1], ini["mlflow"]["database_uri"]):
        assert re.fullmatch(r"postgresql://\w+@[\w.\-]+:\d+/\w+", uri), uri  # user, no password
    assert "admin_password" not in ini["mlflow"]
    assert "valueFrom" in env["PGPASSWORD"]
    mount = next(m["mountPath"] for m in SERVER["volumeMounts"] if m["name"] == "auth")
    assert env["MLFLOW_AUTH_CONFIG_PATH"]["value"] == f"{mount}/basic_auth.ini"


def test_mlflow_accepts_the_host_clients_use():
    env = {e["name"]: e for e in SERVER["env"]}
    allowed = [h.strip() for h in env["MLFLOW_SERVER_ALLOWED_HOSTS"]["value"].split(",")]
    host_port = cluster.mlflow_tracking_uri(CFG).removeprefix("http://")
    assert host_port in allowed and host_port.split(":")[0] in allowed
    assert find("Service", cluster.MLFLOW_SERVICE)["spec"]["ports"][0]["port"] == cluster.MLFLOW_PORT
