"""Orchestration helpers that need no service: the sweep grid, params without secrets, the tables."""

from __future__ import annotations

from dualview_core.config import OpenAIEngineConfig, PipelineConfig, DataSource, SweepConfig, SynthesisConfig
from dualview_core.evaluation.stats import Interval
from dualview_core.training.sweep_grid import points as sweep_points
from tasks.stages import synthesis_slot
from tasks.evaluation.summary import comparison_table, sweep_figure
from tasks.tracking.mlflow_access import flatten


def test_sweep_grid_expands_ratios_only_for_the_ratio_mixture():
    points = sweep_points(SweepConfig(mixtures=("all-dv", "ratio"), ratios=(0.0, 0.5), random_seeds=(0, 1)))
    assert [p["name"] for p in points] == ["all-dv-s0", "all-dv-s1", "ratio-r0-s0", "ratio-r0-s1", "ratio-r0.5-s0", "ratio-r0.5-s1"]


def test_params_are_flat_and_hold_no_secret():
    cfg = PipelineConfig(
        seeds=DataSource(path="s3://bucket/seeds.jsonl", storage_options={
            "key": "AKIA-SECRET", "secret": "s3cr3t", "token": "t0k3n",
            "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "aws_secret_access_key": "s3cr3t"}}),
        synthesis=SynthesisConfig(engine="openai", openai=OpenAIEngineConfig(api_key_env="MY_KEY_VAR")),
    )
    params = flatten(cfg)
    text = repr(params)
    assert "AKIA-SECRET" not in text and "s3cr3t" not in text and "t0k3n" not in text
    assert params["seeds.storage_options.endpoint_url"] == "http://127.0.0.1:9000"
    assert params["synthesis.openai.api_key_env"] == "MY_KEY_VAR"  # a variable's name, not its value
    assert params["training.temperature"] == "0.02" and params["synthesis.vllm.model"] == "smollm2"
    assert all(len(v) <= 500 for v in params.values())


class _Report:
    suite = "followir"
    columns = {"followir/p-MRR": "FollowIR p-MRR", "followir/score": "FollowIR Score"}

    def __init__(self, pmrr, score):
        self.summary = {"followir/p-MRR": Interval(pmrr, pmrr - 1, pmrr + 1), "followir/score": Interval(score, score - 2, score + 2)}


def test_comparison_table_has_a_row_per_model_with_intervals():
    table = comparison_table({"base": _Report(-1.5, 80.0), "trained": _Report(3.25, 81.5)})
    lines = table.splitlines()
    assert lines[0].startswith("suite followir")
    assert lines[1].split() == ["model", "FollowIR", "p-MRR", "FollowIR", "Score"]
    assert lines[3].split()[0] == "base" and "-1.50" in lines[3] and "[" in lines[3]
    assert "3.25 [   2.25,    4.25]" in lines[4] and "81.50 [  79.50,   83.50]" in lines[4]


def test_the_paper_suite_prints_table_one(tmp_path):
    from dualview_core.evaluation.suites import plan
    from tasks.evaluation.summary import table

    columns = plan("paper").columns()
    rows = {"all-dv": {"followir/p-MRR": (7.57, 6.0, 9.0)}, "all-orig": {"followir/p-MRR": (5.21, 4.0, 6.5)}}
    lines = table(rows, columns, label="run").splitlines()
    assert lines[0].split()[1:] == "FollowIR p-MRR FollowIR Score InfoSearch length InfoSearch keyword MAIR IFEval MAIR InstructIR".split()
    assert "7.57 [   6.00,    9.00]" in lines[2] and lines[3].count("n/a") == 5


def test_sweep_figure_has_one_panel_per_column():
    metrics = {"followir/p-MRR": {"value": 1.0, "ci_low": 0.0, "ci_high": 2.0},
               "followir/score": {"value": 50.0, "ci_low": 48.0, "ci_high": 52.0}}
    fig = sweep_figure([{"name": "ratio-r0-s0", "metrics": metrics}, {"name": "ratio-r0.5-s0", "metrics": metrics}], metrics,
                       _Report.columns)
    assert [ax.get_title() for ax in fig.axes] == ["FollowIR p-MRR", "FollowIR Score"]


def test_each_output_folder_has_its_own_concurrency_slot():
    assert synthesis_slot("/a/out") == synthesis_slot("/a/out") != synthesis_slot("s3://b/out")


def test_progress_lines_come_every_tenth_step_and_with_each_separation():
    from tasks.training.trainer import LOSS, SEPARATION, progress_line

    lines = {step: progress_line(step, {LOSS: 1.0 / step}) for step in range(1, 31)}
    assert [step for step, line in lines.items() if line] == [10, 20, 30]
    assert lines[20] == "train: step 20 loss 0.05"
    assert progress_line(7, {SEPARATION: 0.31234}) == "train: step 7 instruction_separation 0.3123"
