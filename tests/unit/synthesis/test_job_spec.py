"""Synthesis as a Ray Job: the submitted spec, the CLI that runs it, following its log, its failure."""

from __future__ import annotations

import doctest
import json
import os
import shlex

import pytest

from dualview_core.synthesis import job_spec
from dualview_core.config import OpenAIEngineConfig, RayJobConfig, SynthesisConfig
from flows.cli import build_parser

JOB = RayJobConfig(address="http://head:8265")
CFG = SynthesisConfig(engine="openai", shard_rows=64, openai=OpenAIEngineConfig(actors=4, base_urls=("http://a/v1", "http://b/v1")),
                      ray_job=JOB)


def test_the_module_examples_hold():
    assert doctest.testmod(job_spec).failed == 0


def test_the_spec_carries_the_whole_run_through_the_cli_and_back(tmp_path):
    spec = job_spec.job_spec("seeds.jsonl", {}, "s3://b/out/", {"client_kwargs": {"endpoint_url": "http://s3"}}, CFG)
    argv = shlex.split(job_spec.entrypoint(spec))
    assert argv[:3] == ["dualview", "synthesize", "--spec"] and len(argv) == 4
    args = build_parser().parse_args(argv[1:])  # what the CLI receives as --spec
    seeds, seed_options, out, out_options, cfg = job_spec.read_spec(args.spec)
    assert seeds == os.path.abspath("seeds.jsonl") and out == "s3://b/out/"  # a local path made absolute
    assert seed_options == {} and out_options == {"client_kwargs": {"endpoint_url": "http://s3"}}
    # the job is its own driver: no job inside the job, no address to join but its own cluster's
    assert cfg == CFG.model_copy(update={"ray_job": None})
    assert job_spec.job_spec("s", {"anon": True}, "o", None, CFG)["out_options"] == {"anon": True}  # out defaults to the seeds'


@pytest.mark.parametrize("options, named", [
    ({"key": "AKIA", "secret": "s"}, "key, secret"),
    ({"client_kwargs": {"aws_secret_access_key": "s"}}, "client_kwargs.aws_secret_access_key"),
    ({"token": "t"}, "token"),
])
def test_credentials_in_storage_options_are_refused_before_anything_is_submitted(options, named):
    with pytest.raises(ValueError, match=f"credentials \\({named}\\)"):
        job_spec.job_spec("s3://b/seeds/", options, "s3://b/out/", None, CFG)
    with pytest.raises(ValueError, match="out storage options"):
        job_spec.job_spec("s3://b/seeds/", {}, "s3://b/out/", options, CFG)


def test_a_job_and_an_address_to_join_are_one_driver_too_many():
    with pytest.raises(ValueError, match="leave ray_address unset"):
        SynthesisConfig(ray_job=JOB, ray_address="ray://head:10001")


def test_log_lines_are_followed_whole_and_once():
    log, seen, got = "", 0, []
    for chunk in ("synthesis: 12 seeds", ", 12 to send\n4/12 ro", "ws\n", "", "8/12 rows\n12/12"):
        log += chunk
        lines, seen = job_spec.new_lines(log, seen)
        got += lines
    assert got == ["synthesis: 12 seeds, 12 to send", "4/12 rows", "8/12 rows"]  # the unfinished line waits
    assert job_spec.new_lines(log + "\n", seen) == (["12/12"], len(log) + 1)
    assert job_spec.new_lines("\x1b[33m(raylet)\x1b[0m Task failed\n", 0)[0] == ["(raylet) Task failed"]


def test_a_failure_names_the_job_its_status_and_its_last_lines():
    log = "".join(f"line {i}\n" for i in range(50)) + "\n  \nFileNotFoundError: s3://b/missing/\n"
    message = job_spec.failure("job-1", "FAILED", "Job entrypoint command failed with exit code 1", log, tail=3)
    head, tail = message.split("\nlast log lines:\n")
    assert head == "Ray job job-1 failed: Job entrypoint command failed with exit code 1"
    assert tail.splitlines() == ["line 48", "line 49", "FileNotFoundError: s3://b/missing/"]
    assert job_spec.failure("job-2", "STOPPED", None, "", tail=3) == "Ray job job-2 stopped\n(the job wrote no log)"


def test_the_spec_is_one_shell_word_whatever_the_config_holds():
    cfg = CFG.model_copy(update={"sampling": CFG.sampling.model_copy(update={"stop": ("it's", "\"q\"", "$(x)")})})
    command = job_spec.entrypoint(job_spec.job_spec("s3://b/seeds/", {}, "s3://b/out/", None, cfg))
    assert json.loads(shlex.split(command)[3])["config"]["sampling"]["stop"] == ["it's", "\"q\"", "$(x)"]


def test_the_cli_needs_seeds_and_out_or_a_spec(capsys):
    from flows.cli import main

    assert main(["synthesize", "--seeds", "s.jsonl"]) == 2
    assert "give --seeds and --out (or --spec)" in capsys.readouterr().err
