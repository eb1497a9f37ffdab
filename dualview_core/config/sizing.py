"""Sizing arithmetic of the 80B model on the cluster, quoted by docs/cluster.md: weights per GPU,
the smallest tensor-parallel degree, KV cache and linear-attention state, synthesis hours.

    >>> min_tensor_parallel(weights_gib(80e9, 2), gpu_memory_gib=80, utilization=0.9)
    4
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dualview_core.config.cluster import ClusterConfig

@dataclass(frozen=True)
class HybridModel:
    """What memory sizing needs from a hybrid (linear + full attention) MoE model's config.json."""

    params: float  # total parameters (all experts)
    layers: int
    full_attention_interval: int  # every n-th layer is full attention; the rest are Gated DeltaNet
    kv_heads: int
    head_dim: int
    linear_value_heads: int
    linear_key_dim: int
    linear_value_dim: int


# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (80B total, 3B active per token).
QWEN3_NEXT_80B = HybridModel(params=80e9, layers=48, full_attention_interval=4, kv_heads=2, head_dim=256,
                             linear_value_heads=32, linear_key_dim=128, linear_value_dim=128)
GIB = 2**30


def weights_gib(params: float, bytes_per_param: float) -> float:
    """BF16 = 2 bytes, FP8 = 1 byte. 80e9 params in BF16: 160 GB = 149 GiB."""
    return params * bytes_per_param / GIB


def min_tensor_parallel(weights: float, gpu_memory_gib: float, utilization: float, reserve: float = 0.25) -> int:
    """Smallest power-of-two TP degree whose weight shard leaves `reserve` of vLLM's budget
    (utilization x GPU memory) for KV cache, activations and CUDA graphs."""
    budget = utilization * gpu_memory_gib * (1 - reserve)
    tp = 1
    while weights / tp > budget:
        tp *= 2
    return tp


def kv_bytes_per_token(m: HybridModel, dtype_bytes: int = 2) -> int:
    """K and V of the full-attention layers only; the linear layers keep a fixed state instead.
    Qwen3-Next: 2 x 12 layers x 2 heads x 256 x 2 bytes = 24 KiB per token."""
    return 2 * (m.layers // m.full_attention_interval) * m.kv_heads * m.head_dim * dtype_bytes


def linear_state_bytes_per_sequence(m: HybridModel, dtype_bytes: int = 2) -> int:
    """The Gated DeltaNet recurrent state (heads x key dim x value dim per linear layer), independent of
    length. The short convolution state (~5% more) is left out. Qwen3-Next: 36 x 32 x 128 x 128 x 2 B = 36 MiB."""
    linear_layers = m.layers - m.layers // m.full_attention_interval
    return linear_layers * m.linear_value_heads * m.linear_key_dim * m.linear_value_dim * dtype_bytes


@dataclass(frozen=True)
class SynthesisEstimate:
    prompt_tokens: int
    completion_tokens: int
    hours: float  # wall clock on all replicas


def synthesis_estimate(rows: int, prompt_tokens_per_row: float, completion_tokens_per_row: float, *,
                       prefill_tokens_per_s: float, decode_tokens_per_s: float, replicas: int) -> SynthesisEstimate:
    """Tokens and hours for `rows` LLM calls. Per replica, prefill and decode are added (no overlap):
    a pessimistic model, since continuous batching overlaps them. Rates are per replica.

    >>> synthesis_estimate(1000, 1000, 100, prefill_tokens_per_s=1000, decode_tokens_per_s=100, replicas=2).hours
    0.2777777777777778
    """
    prompt, completion = round(rows * prompt_tokens_per_row), round(rows * completion_tokens_per_row)
    seconds = (prompt / prefill_tokens_per_s + completion / decode_tokens_per_s) / replicas
    return SynthesisEstimate(prompt, completion, seconds / 3600)


def rows_in_flight(cfg: ClusterConfig) -> int:
    """Rows Ray Data keeps inside one vLLM replica: the engine can batch no more than this."""
    v = cfg.synthesis.vllm
    return v.batch_size * v.max_concurrent_batches
