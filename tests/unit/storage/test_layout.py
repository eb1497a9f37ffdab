"""The output layout: one owner of folder names and of which storage options an output gets."""

from __future__ import annotations

from dualview_core.config import DataSource, PipelineConfig
from dualview_core.storage.layout import DUAL_VIEWS, Layout, dual_views_of, output_options


def test_every_folder_hangs_off_the_workdir_whatever_its_trailing_slash():
    for workdir in ("s3://bucket/runs", "s3://bucket/runs/"):
        layout = Layout(workdir)
        assert layout.synthesis == "s3://bucket/runs/synthesis"
        assert layout.dual_views == f"s3://bucket/runs/synthesis/{DUAL_VIEWS}" == dual_views_of("s3://bucket/runs/synthesis/")
        assert layout.model("r1") == "s3://bucket/runs/models/r1"
        assert layout.evaluation("r1") == "s3://bucket/runs/eval/r1"
        assert layout.evaluation("r1", "base") == "s3://bucket/runs/eval/r1/base"
        assert layout.sweep_point("r1", "ins-dv-s0") == "s3://bucket/runs/sweep/r1/ins-dv-s0"
        assert layout.sweep_point_evaluation("r1", "ins-dv-s0") == "s3://bucket/runs/sweep/r1/ins-dv-s0-eval"


def test_an_output_uses_its_own_options_when_given_even_empty_else_the_seeds():
    seeds = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}
    assert output_options(None, seeds) == seeds
    assert output_options({}, seeds) == {}  # a local workdir next to s3:// seeds
    assert output_options({"anon": True}, seeds) == {"anon": True}
    assert output_options(None, None) == {}
    assert output_options(None, seeds) is not seeds  # a copy: a caller's change never reaches the config


def test_the_pipeline_asks_the_layout_for_its_folders_and_options():
    p = PipelineConfig(seeds=DataSource(path="s3://b/seeds", storage_options={"anon": True}), workdir="s3://b/w/")
    assert p.layout().dual_views == "s3://b/w/synthesis/dual_views.parquet"
    assert p.output_options() == {"anon": True}
    assert p.model_copy(update={"workdir_storage_options": {}}).output_options() == {}
