"""On CUDA: the in-process vLLM engine (vLLM's CUDA build through Ray Data) synthesizing a few bundled
sample seeds with the packaged SmolLM2, at tensor parallel 1 and, with enough GPUs, across GPUs.
The CPU twin is tests/integration/test_synthesis.py::test_vllm_engine_through_ray_data_with_an_over_long_seed.

SmolLM2-135M has 9 attention heads and 3 KV heads, and vLLM requires the heads to divide evenly over
the tensor-parallel ranks: 2 is refused ("Total number of attention heads (9) must be divisible by
tensor parallel size (2)"), so the multi-GPU case runs at 3."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from dualview_core import sample
from dualview_core.config import SynthesisConfig, VLLMEngineConfig
from tasks.synthesis.driver import run_synthesis

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
MODEL_CACHE = REPO / ".cache" / "models"  # the packaged GGUF, converted once (tasks/synthesis/llm_models.py)
SEEDS = 6
PREFILL = "<answer><new_instruction>"  # SynthesisConfig's default sampling for the small model


def gpu_config(tensor_parallel_size: int) -> SynthesisConfig:
    """The CPU profile's engine settings with the GPU switches flipped: no CPU placement bundle, bf16,
    eager (no CUDA graphs to capture for a handful of rows), half the memory (a shared GPU)."""
    return SynthesisConfig(limit=SEEDS, shard_rows=4, model_cache_dir=str(MODEL_CACHE), vllm=VLLMEngineConfig(
        model="smollm2", tensor_parallel_size=tensor_parallel_size, cpu=False, dtype="bfloat16", enforce_eager=True,
        gpu_memory_utilization=0.5))


@pytest.mark.parametrize("tensor_parallel_size", [1, 3])
def test_vllm_on_cuda_turns_every_seed_into_a_dual_view_or_a_rejection(tensor_parallel_size, tmp_path):
    if torch.cuda.device_count() < tensor_parallel_size:
        pytest.skip(f"tensor parallel {tensor_parallel_size} needs torch.cuda.device_count() >= {tensor_parallel_size}; "
                    f"this machine has {torch.cuda.device_count()}")
    out = tmp_path / "syn"
    cfg = gpu_config(tensor_parallel_size)
    assert cfg.vllm.tensor_parallel_size == tensor_parallel_size and not cfg.vllm.cpu
    summary = run_synthesis(sample.seeds_path(), str(out), cfg, progress=lambda m: None)

    dual_views = pq.read_table(out / "dual_views.parquet").to_pylist()
    rejections = pq.read_table(out / "rejections.parquet").to_pylist()
    assert summary["plan"]["pending"] == SEEDS and summary["cost"]["engine_rows"] == SEEDS
    # every seed is either a dual view or a rejection, and the files, the summary and its outcomes agree
    assert len(dual_views) + len(rejections) == SEEDS == summary["dual_views"] + summary["rejected"]
    assert summary["outcomes"]["accepted"] + summary["outcomes"]["rejected"] == SEEDS
    assert "engine_error" not in summary["outcomes"]["by_reason"], summary["outcomes"]
    # the prompts went through the engine and it answered each once, continuing the prefill
    assert summary["cost"]["prompt_tokens"] > 0 and summary["cost"]["attempts"] == SEEDS, summary["cost"]
    assert all(r["raw_response"].startswith(PREFILL) for r in rejections if r["attempts"])
    assert all(v["instruction"] for v in dual_views) and all(r["rejection"] for r in rejections)
    assert {v["model_id"] for v in dual_views} <= {"smollm2"}
