"""What a flow's MLflow run says ran, the metered encoder, and the folders the project env creates."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dualview_core.config import EvaluationConfig, DataSource, PipelineConfig, TrainingConfig
from flows.commands import FOLDER_VARIABLES, apply_project_env
from tasks.evaluation.runner import MeteredEncoder
from tasks.tracking.runs import (
    BASE_MODEL,
    FILTERING,
    GIT_COMMIT,
    KIND,
    MIXTURE,
    MODEL,
    PROFILE,
    PROMPT_VERSION,
    SYNTHESIS_MODEL,
    dual_view_origin,
    evaluate_lineage,
    pipeline_lineage,
    train_lineage,
)


def test_an_evaluate_run_names_only_what_it_evaluated():
    tags, params = evaluate_lineage("/models/x", DataSource(path="/evals/core17"), EvaluationConfig())
    assert tags[KIND] == "evaluate" and tags[MODEL] == "/models/x"
    assert SYNTHESIS_MODEL not in tags and BASE_MODEL not in tags
    assert params["model"] == "/models/x" and "evaluation.max_length" in params
    assert not any(k.startswith(("synthesis.", "training.")) for k in params)


def test_a_pipeline_run_names_its_profile_mixture_backbone_filtering_and_commit():
    from dualview_core.config.profiles import resolve

    tags, _ = pipeline_lineage(resolve("cluster"), "cluster")
    assert (tags[KIND], tags[PROFILE], tags[MIXTURE], tags[BASE_MODEL], tags[FILTERING]) == (
        "pipeline", "cluster", "ins-dv", "gte-multilingual-mlm-base", "none")
    assert len(tags[GIT_COMMIT]) == 40
    assert PROFILE not in pipeline_lineage(PipelineConfig())[0]  # a config built in code has no profile to name


def test_a_train_run_names_the_synthesis_model_found_in_its_dual_views(tmp_path):
    path = tmp_path / "dual_views.parquet"
    pq.write_table(pa.table({"model_id": ["qwen3-next", "qwen3-next", "smollm2"], "prompt_version": ["p1"] * 3}), path)
    tags, params = train_lineage(TrainingConfig(model="minilm"), DataSource(path="/s.jsonl"), str(path), {})
    assert tags[KIND] == "train" and tags[BASE_MODEL] == "minilm"
    assert tags[SYNTHESIS_MODEL] == "qwen3-next,smollm2" and tags[PROMPT_VERSION] == "p1"
    assert params["dual_views"] == str(path) and "training.temperature" in params
    assert dual_view_origin(str(tmp_path / "missing.parquet"), {}) == {}


class _LengthEncoder:
    """Embeds a text as [len(text), position in this call]: shows order and blocking."""

    def __init__(self):
        self.calls = []

    def encode_document(self, texts, batch_size=64):
        self.calls.append(len(texts))
        return np.array([[len(t), i] for i, t in enumerate(texts)], dtype=np.float32)


def test_metered_encoder_reports_progress_and_keeps_the_callers_order():
    inner, lines = _LengthEncoder(), []
    texts = ["x" * (i % 7 + 1) for i in range(25)]
    out = MeteredEncoder(inner, lines.append, block=10, min_texts=20).encode_document(texts)
    assert out[:, 0].tolist() == [len(t) for t in texts]
    assert inner.calls == [10, 10, 5] and lines[-1].startswith("evaluate: encoding documents: 25/25 texts (100%)")
    small = MeteredEncoder(inner, lines.append, min_texts=100).encode_document(texts[:3])
    assert small[:, 1].tolist() == [0, 1, 2] and inner.calls[-1] == 3  # below min_texts: passed through


def test_project_env_creates_every_folder_it_names_with_parents(tmp_path, monkeypatch):
    nested = tmp_path / "fresh" / "clone" / ".cache" / "prefect"
    monkeypatch.setenv("PREFECT_HOME", str(nested))
    apply_project_env()
    assert nested.is_dir()
    assert all(os.path.isdir(os.environ[name]) for name in FOLDER_VARIABLES)
