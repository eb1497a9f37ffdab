"""The step-memory estimate: closed-form numbers on a hand-made shape."""

import pytest

from dualview_core.training.memory import GIB, RUNTIME, ModelShape, StepMemory, activation_bytes, graph_texts, shortfall, \
    state_bytes, step_memory

SHAPE = ModelShape(params=1_000_000, layers=2, hidden=64, heads=4, intermediate=256)


@pytest.mark.parametrize("precision, stage, world, per_param", [
    ("fp32", 0, 1, 16),  # weights 4 + grads 4 + Adam 8
    ("fp32", 0, 4, 16),  # stage 0 replicates everything
    ("fp32", 1, 2, 12),  # Adam 8 / 2 + 4 + 4
    ("fp32", 2, 4, 7),  # 8 / 4 + 4 / 4 + 4
    ("fp32", 3, 4, 4),  # 8 / 4 + 4 / 4 + 4 / 4
    ("bf16", 0, 1, 20),  # Adam 8 + (2 + 4) grads + (2 + 4) weights
])
def test_state_bytes_per_parameter(precision, stage, world, per_param):
    assert state_bytes(SHAPE, precision=precision, zero_stage=stage, world=world) == per_param * 1_000_000


def test_activation_bytes_closed_form():
    # 2 texts x 8 tokens = 16 tokens; per layer 16 x (12 x 64 + 2 x 256) x 4 = 81920 plus attention
    # 2 x 4 heads x 8² x (2 x 4 + 1) = 4608; two layers
    assert activation_bytes(SHAPE, texts=2, max_length=8, precision="fp32") == 2 * (81920 + 4608)
    # bf16: 16 x 1280 x 2 = 40960 and 2 x 4 x 64 x 5 = 2560
    assert activation_bytes(SHAPE, texts=2, max_length=8, precision="bf16") == 2 * (40960 + 2560)


def test_graph_texts_is_the_chunk_or_the_whole_micro_batch():
    assert graph_texts(grad_cache_chunk=16, batch_size=16, negatives=30) == 16
    assert graph_texts(grad_cache_chunk=0, batch_size=16, negatives=30) == 16 * 32  # queries, positives, K each
    assert graph_texts(grad_cache_chunk=1000, batch_size=2, negatives=1) == 6  # never more than the batch has


def test_step_memory_adds_state_activations_and_runtime():
    need = step_memory(SHAPE, grad_cache_chunk=2, batch_size=4, negatives=3, max_length=8, precision="fp32",
                       zero_stage=0, world=1)
    assert need == StepMemory(16_000_000, 2 * (81920 + 4608), 2)
    assert need.total == 16_000_000 + 173_056 + RUNTIME


def test_minilm_at_the_paper_length():
    # MiniLM-L6 (6 layers, 384 hidden, 12 heads, 1536 intermediate), 16 texts at 512 tokens, fp32:
    # 8192 tokens x 7680 x 4 = 251658240 and 16 x 12 x 512² x 9 = 452984832 per layer
    minilm = ModelShape(params=22_713_216, layers=6, hidden=384, heads=12, intermediate=1536)
    assert activation_bytes(minilm, texts=16, max_length=512, precision="fp32") == 6 * (251_658_240 + 452_984_832)


def test_shortfall_names_the_flag_to_change():
    need = StepMemory(state=GIB, activations=4 * GIB, texts=16)
    assert shortfall(need, 6 * GIB, where="this machine", grad_cache_chunk=16, max_length=512) is None
    line = shortfall(need, 5 * GIB, where="this machine", grad_cache_chunk=16, max_length=512)
    assert line == ("a training step needs about 6.0 GiB per rank (weights, gradients and optimizer 1.0 GiB, "
                    "activations of 16 texts at 512 tokens 4.0 GiB, runtime 1.0 GiB) but this machine has 5.0 GiB "
                    "available; lower --grad-cache-chunk (now 16) or --max-length (now 512)")
    off = shortfall(need, GIB, where="the GPU", grad_cache_chunk=0, max_length=128)
    assert off.endswith("turn on gradient caching (--grad-cache-chunk 8) or lower --max-length (now 128)")
    assert "\n" not in line + off


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="unknown precision"):
        state_bytes(SHAPE, precision="fp8", zero_stage=0, world=1)
