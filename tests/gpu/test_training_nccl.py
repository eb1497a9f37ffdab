"""On CUDA: two ranks under the `deepspeed` launcher, one GPU each, talking over NCCL (in-batch
negatives gathered across ranks), publishing to a local folder. The CPU twin of this test (gloo,
saving to S3) is tests/integration/test_training.py::test_two_ranks_under_the_deepspeed_launcher_save_to_s3."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dualview_core.config import MixtureConfig, TrainingConfig
from tasks.training.worker import run
from tasks.training.trainer import LOSS
from tests.helpers.samples import CHECKPOINT_FILES

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_two_nccl_ranks_under_the_deepspeed_launcher_save_a_checkpoint(sample, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs torch.cuda.device_count() >= 2 for two NCCL ranks; "
                    f"this machine has {torch.cuda.device_count()}")
    from sentence_transformers import SentenceTransformer

    cfg = TrainingConfig(mixture=MixtureConfig(name="ins-dv"), batch_size=2, max_steps=3, zero_stage=2,
                         max_length=64, negatives=3, learning_rate=5e-5)
    signals: list[int] = []
    out = tmp_path / "two-ranks"
    result = run(cfg, *sample, str(out), processes=2,
                 callback=lambda step, metrics: signals.append(step) if LOSS in metrics else None)

    assert result.world_size == 2 and result.steps == 3 and result.checkpoint == str(out)
    assert signals == [1, 2, 3]  # rank 0's signals reached this process, one per optimizer step
    losses = [(r["step"], r[LOSS]) for r in result.history if LOSS in r]
    assert [step for step, _ in losses] == [1, 2, 3]  # one loss per step, in order
    assert all(math.isfinite(loss) and loss > 0 for _, loss in losses), losses

    assert CHECKPOINT_FILES <= {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    meta = json.loads((out / "dualview.json").read_text())
    assert meta["world_size"] == 2 and meta["steps"] == 3 and meta["data_digest"] == result.digest
    texts = ["query one", "a document about wind"]
    trained = SentenceTransformer(str(Path(out)), device="cpu")
    assert trained.max_seq_length == cfg.max_length and np.isfinite(trained.encode(texts)).all()
