"""`benchmarks/gpu.py --smoke`: the GPU benchmark's whole path (a random encoder of a chosen shape,
synthetic seeds, the project's trainer, CachedMultipleNegativesRankingLoss, the evaluation encoder,
`SentenceTransformer.encode_document`) runs on the CPU and writes its JSON, so that on a lent GPU
only the accelerator is new. Its numbers are not checked: a smoke run measures nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dualview_core.storage.layout import PROJECT_ROOT

pytestmark = [pytest.mark.integration]


def test_the_smoke_mode_runs_every_part_and_writes_one_json(tmp_path):
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / "gpu.py"), "--smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert report["args"]["shape"] == "tiny" and report["non_embedding_params"] > 0
    train = report["train"]
    for side in ("ours", "sentence_transformers"):
        assert train[side]["steps"] == 4 and train[side]["queries_per_s"] > 0, train
        assert (train[side]["device"], train[side]["precision"]) == ("cpu", "fp32")
        assert train[side]["mfu"] is None  # no known peak for a CPU
    assert train["ratio"] > 0
    # the smoke shape's whole step fits: auto turns caching off, and the loss gets one mini-batch per column
    assert train["ours"]["grad_cache_chunk"] == 0 and train["sentence_transformers"]["mini_batch_size"] == 4
    encode = report["encode"]
    assert encode["docs"] == 64 and encode["ours_docs_per_s"] > 0 and encode["sentence_transformers_docs_per_s"] > 0
    assert encode["max_abs_diff"] < 1e-5  # the same weights, the same dtype: the same embeddings
