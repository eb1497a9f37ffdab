"""The sizing arithmetic of dualview_core/config/sizing.py on hand-computed values, and the runbook's numbers
recomputed from it, so docs/cluster.md cannot drift from the code that produced them."""

from __future__ import annotations

import pytest

from dualview_core.config import sizing as cluster
from dualview_core.config.sizing import QWEN3_NEXT_80B as M
from tests.helpers.infra import CFG, ROOT

RUNBOOK = (ROOT / "docs" / "cluster.md").read_text()
MEASURED_PROMPT_TOKENS = 8_770 / 8  # polarity-reversal prompt + bundled sample, SmolLM2 tokenizer
ANSWER_TOKENS, MAX_TOKENS = 70, 1024
PREFILL, DECODE = 40_000, 3_000  # the runbook's assumed per-replica rates (tokens/s)


def test_weights():
    assert cluster.weights_gib(80e9, 2) == pytest.approx(160e9 / 2**30)  # 149.0 GiB
    assert cluster.weights_gib(80e9, 1) == pytest.approx(74.506, abs=1e-3)


@pytest.mark.parametrize("gpu_gib, bytes_per_param, tp", [
    (80, 2, 4),  # 149/2 = 74.5 > 0.9*80*0.75 = 54; 149/4 = 37.3 fits
    (80, 1, 2),
    (141, 2, 2),  # 74.5 <= 0.9*141*0.75 = 95.2
    (48, 2, 8),
    (48, 1, 4),
])
def test_min_tensor_parallel(gpu_gib, bytes_per_param, tp):
    assert cluster.min_tensor_parallel(cluster.weights_gib(M.params, bytes_per_param), gpu_gib, 0.9) == tp


def test_production_tp_is_the_smallest_that_fits_the_configured_gpu():
    weights = cluster.weights_gib(M.params, 2)
    v = CFG.synthesis.vllm
    assert cluster.min_tensor_parallel(weights, CFG.gpu_memory_gib, v.gpu_memory_utilization) == v.tensor_parallel_size


def test_cache_sizes():
    assert cluster.kv_bytes_per_token(M) == 2 * 12 * 2 * 256 * 2 == 24 * 1024
    assert cluster.linear_state_bytes_per_sequence(M) == 36 * 32 * 128 * 128 * 2 == 36 * 2**20


def test_synthesis_estimate_by_hand():
    e = cluster.synthesis_estimate(10, 100, 5, prefill_tokens_per_s=50, decode_tokens_per_s=1, replicas=2)
    assert (e.prompt_tokens, e.completion_tokens) == (1000, 50)
    assert e.hours == pytest.approx((1000 / 50 + 50 / 1) / 2 / 3600)


def test_rows_in_flight_is_what_production_keeps_per_replica():
    assert cluster.rows_in_flight(CFG) == 16 * 64 == 2 * CFG.synthesis.vllm.max_num_seqs


def _estimate(answer_tokens: int, replicas: int) -> cluster.SynthesisEstimate:
    return cluster.synthesis_estimate(480_000, MEASURED_PROMPT_TOKENS, answer_tokens,
                                      prefill_tokens_per_s=PREFILL, decode_tokens_per_s=DECODE, replicas=replicas)


def test_the_runbook_quotes_what_the_code_computes():
    quoted = [
        f"**{cluster.weights_gib(M.params, 2):.0f} GiB**",
        f"**{cluster.weights_gib(M.params, 1):.1f} GiB**",
        f"**{cluster.kv_bytes_per_token(M) // 1024} KiB per token**",
        f"**{cluster.linear_state_bytes_per_sequence(M) // 2**20} MiB**",
        f"**{cluster.rows_in_flight(CFG)} rows**",
        f"**{round(MEASURED_PROMPT_TOKENS):,} per row**",
        f"**{_estimate(ANSWER_TOKENS, 1).prompt_tokens / 1e6:.1f} M**",
        f"**{_estimate(ANSWER_TOKENS, 1).completion_tokens / 1e6:.1f} M**",
        f"**{_estimate(MAX_TOKENS, 1).completion_tokens / 1e6:.1f} M**",
        f"**{_estimate(ANSWER_TOKENS, 1).hours:.1f} h**",
        f"**{_estimate(ANSWER_TOKENS, CFG.synthesis.vllm.replicas).hours:.1f} h**",
        f"**{_estimate(MAX_TOKENS, CFG.synthesis.vllm.replicas).hours:.1f} h**",
        f"TP **{CFG.synthesis.vllm.tensor_parallel_size}**",
        f"{PREFILL // 1000}k prompt tokens/s",
        f"{DECODE // 1000}k completion tokens/s",
    ]
    missing = [q for q in quoted if q not in RUNBOOK]
    assert not missing, missing


def test_a_vllm_setting_that_cannot_fill_its_engine_is_refused():
    from dualview_core.config import VLLMEngineConfig

    for v in (VLLMEngineConfig(), CFG.synthesis.vllm):  # both profiles keep twice what the engine decodes
        assert v.batch_size * v.max_concurrent_batches == 2 * v.max_num_seqs
    with pytest.raises(ValueError, match="raise max_concurrent_batches to 16"):
        VLLMEngineConfig(batch_size=2, max_concurrent_batches=4, max_num_seqs=16)
    with pytest.raises(ValueError, match="needs 32"):  # exactly max_num_seqs in flight is not enough
        VLLMEngineConfig(batch_size=8, max_concurrent_batches=2, max_num_seqs=16)
    assert VLLMEngineConfig(batch_size=2, max_concurrent_batches=4, max_num_seqs=None).max_num_seqs is None  # vLLM's own
