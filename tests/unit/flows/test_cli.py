"""`dualview seeds check` and friends: JSON out, exit 0 when read, exit 2 with one line when not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from flows.cli import main
from tests.helpers.factories import promptriever_row, write_jsonl


def run(capsys, *argv) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_check_prints_summary_and_writes_quarantine(tmp_path, capsys):
    bad = promptriever_row("q2")
    bad["new_negatives"][0]["text"] = bad["positive_passages"][0]["text"]
    path = write_jsonl(tmp_path / "s.jsonl", [promptriever_row("q1"), bad, "{oops", promptriever_row("q1", instruct=False)])
    qpath = tmp_path / "quarantine.parquet"
    code, summary, err = run(capsys, "seeds", "check", str(path), "--quarantine", str(qpath))
    assert code == 0 and err == ""
    assert summary["rows"] == 4 and summary["valid"] == 2 and summary["quarantined"] == 2
    assert summary["by_reason"] == {"instruction_negative_is_positive": 1, "malformed_record": 1}
    assert summary["with_instruction_negatives"] == 1
    q = pq.read_table(qpath).to_pylist()
    assert [(r["row_index"], r["reason"]) for r in q] == [(1, "instruction_negative_is_positive"), (2, "malformed_record")]


def test_check_exits_0_when_every_row_is_bad(tmp_path, capsys):
    path = write_jsonl(tmp_path / "s.jsonl", ["[]", "{}", "nope"])
    code, summary, _ = run(capsys, "seeds", "check", str(path))
    assert code == 0 and summary["valid"] == 0 and summary["quarantined"] == 3


def test_missing_or_unsupported_path_exits_2_with_one_line(tmp_path, capsys):
    for path in (tmp_path / "missing.parquet", tmp_path):
        code, summary, err = run(capsys, "seeds", "check", str(path))
        assert code == 2 and summary is None
        assert len(err.strip().splitlines()) == 1 and err.startswith("dualview: error: ")


def test_max_passage_chars_flag(tmp_path, capsys):
    path = write_jsonl(tmp_path / "s.jsonl", [promptriever_row("q1")])
    _, summary, _ = run(capsys, "seeds", "check", str(path), "--max-passage-chars", "10")
    assert summary["by_reason"] == {"passage_too_long": 1}


def test_select_writes_only_synthesis_seeds(tmp_path, capsys):
    path = write_jsonl(tmp_path / "s.jsonl", [promptriever_row("a"), promptriever_row("b", n_inst_neg=0), promptriever_row("a", instruct=False)])
    out = tmp_path / "selected.parquet"
    code, summary, _ = run(capsys, "seeds", "select", str(path), "--out", str(out))
    assert code == 0 and summary["selected"] == 1
    assert pq.read_table(out).column("query_id").to_pylist() == ["a"]


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "dualview"
    out = subprocess.run([str(script), "seeds", "check", "/nonexistent/x.jsonl"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == "dualview: error: /nonexistent/x.jsonl: no such file or folder"


def test_a_ray_client_address_with_local_paths_is_refused_before_anything_starts(tmp_path, capsys):
    """Its tasks would run on the cluster's nodes, which cannot read this machine's files."""
    seeds = write_jsonl(tmp_path / "seeds.jsonl", [promptriever_row("q1")])
    code, summary, err = run(capsys, "synthesize", "--seeds", str(seeds), "--out", str(tmp_path / "out"),
                             "--engine", "openai", "--ray-address", "ray://127.0.0.1:1")
    assert code == 2 and summary is None
    assert err.strip().count("\n") == 0 and str(seeds) in err and "s3://" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def _synthesis(*argv: str):
    from flows.cli import build_parser
    from flows.commands.synthesize_cli import config_from_args

    return config_from_args(build_parser().parse_args(["synthesize", "--seeds", "s", "--out", "o", *argv]))


def test_synthesize_starts_from_the_profile_and_flags_override_it():
    cpu, cluster = _synthesis(), _synthesis("--profile", "cluster")
    assert cpu.vllm.cpu and cpu.vllm.model == "smollm2"
    assert not cluster.vllm.cpu and cluster.vllm.tensor_parallel_size == 4
    assert cluster.ray_job is None  # the CLI is its own driver; --ray-address joins a cluster
    mine = _synthesis("--profile", "cluster", "--model", "Qwen/Qwen3-32B", "--limit", "10")
    assert mine.vllm.model == "Qwen/Qwen3-32B" and mine.limit == 10 and mine.vllm.tensor_parallel_size == 4
    assert _synthesis("--profile", "cluster", "--engine", "openai", "--model", "served").openai.model == "served"


def test_train_profile_gives_training_and_ranks_and_flags_override_it():
    from flows.cli import build_parser
    from flows.commands.train_cli import config_from_args, processes_from_args

    def parse(*argv):
        args = build_parser().parse_args(["train", "--mixture", "ins-dv", "--seeds", "s", "--out", "o", *argv])
        return config_from_args(args), processes_from_args(args)

    plain, ranks = parse()
    assert plain.model == "minilm" and plain.max_length == 512 and ranks == 1
    cluster, ranks = parse("--profile", "cluster", "--max-steps", "5")
    assert cluster.model == "gte-multilingual-mlm-base" and cluster.pooling == "cls" and cluster.zero_stage == 2 and ranks == 4
    assert cluster.max_steps == 5 and cluster.mixture.name == "ins-dv"
    assert parse("--profile", "cluster", "--processes", "2")[1] == 2
    by_epochs, _ = parse("--profile", "cpu", "--epochs", "2")  # the cpu profile's 12-step limit yields to epochs
    assert by_epochs.max_steps is None and by_epochs.epochs == 2 and by_epochs.max_length == 128
    assert cluster.grad_cache_chunk == "auto" and plain.grad_cache_chunk == 8
    assert parse("--grad-cache-chunk", "64", "--device", "cpu", "--precision", "bf16")[0].model_dump(
        include={"grad_cache_chunk", "device", "precision"}) == {"grad_cache_chunk": 64, "device": "cpu", "precision": "bf16"}


def test_a_chunk_is_a_number_of_texts_or_auto(capsys):
    import pytest

    from flows.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--mixture", "ins-dv", "--seeds", "s", "--out", "o", "--grad-cache-chunk", "big"])
    assert exc.value.code == 2 and "expected a number of texts or auto, got 'big'" in capsys.readouterr().err


def test_an_unknown_profile_exits_2_with_one_line(tmp_path, capsys):
    code, summary, err = run(capsys, "synthesize", "--seeds", "s", "--out", str(tmp_path / "o"), "--profile", "laptop")
    assert code == 2 and summary is None
    assert err.strip() == "dualview: error: unknown profile 'laptop'; the profiles are cluster, cpu (profiles/*.yaml)"


def test_a_synthesis_request_that_cannot_fit_is_one_line_before_anything_starts(capsys):
    from flows.cli import main

    code = main(["synthesize", "--seeds", "unused.jsonl", "--out", "unused", "--prompt", "paper"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == ("dualview: error: sampling.max_tokens=2048 leaves no room for a prompt in "
                                 "vllm.max_model_len=2048: lower the one or raise the other")


def test_the_experiment_command_sets_only_what_its_flags_say(capsys):
    from flows.cli import build_parser, main
    from flows.commands.experiment_cli import overrides_from_args

    args = build_parser().parse_args(["experiment", "--seeds", "s3://team/seeds/", "--data", "/data/paper",
                                      "--suite", "paper", "--random-seeds", "0", "1"])
    assert overrides_from_args(args) == {"pipeline": {"seeds": {"path": "s3://team/seeds/"}, "eval_set": {"path": "/data/paper"},
                                                      "evaluation": {"suite": "paper"}}, "random_seeds": [0, 1]}
    assert overrides_from_args(build_parser().parse_args(["experiment"])) == {"pipeline": {}}
    assert main(["experiment", "--scale", "0"]) == 2
    assert capsys.readouterr().err.strip() == "dualview: error: --scale must be positive (got 0.0)"


def test_the_pipeline_command_sets_only_what_its_flags_say():
    from flows.cli import build_parser
    from flows.commands.pipeline_cli import overrides_from_args

    args = build_parser().parse_args(["pipeline", "--profile", "cluster", "--seeds", "s3://team/seeds/", "--mixture",
                                      "all-dv", "--registered-model", "team-retriever", "--register-alias", "candidate"])
    assert overrides_from_args(args) == {"seeds": {"path": "s3://team/seeds/"}, "training": {"mixture": {"name": "all-dv"}},
                                         "registered_model": "team-retriever", "register_alias": "candidate"}
    assert overrides_from_args(build_parser().parse_args(["pipeline"])) == {}


def test_a_pipeline_request_mlflow_would_refuse_is_one_line_before_anything_starts(capsys):
    # 'latest' names whatever version is newest in MLflow, so it cannot be moved; refused before synthesis
    code, out, err = run(capsys, "pipeline", "--register-alias", "latest")
    assert (code, out) == (2, None)
    assert err == ("dualview: error: register_alias: 'latest' is not an alias: letters, digits, _ and -, and not "
                   "'latest' or a version such as 'v3'\n")
    code, out, err = run(capsys, "pipeline", "--registered-model", "team/retriever")
    assert (code, out) == (2, None) and err.count("\n") == 1
    assert err.startswith("dualview: error: registered_model: String should match pattern")
