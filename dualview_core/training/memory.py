"""How much memory one training step needs: pure arithmetic on the model's shape and the config.

Owns the estimate the pre-flight check compares with the memory a rank has (the task measures that:
RAM on CPU, device memory on GPU) and the one-line refusal naming the flag to change. It reads no
files and imports no torch: the shape comes in as numbers (`ModelShape`, from the model's
config.json and weight file), so the check runs before any model or data is loaded.

A rank's peak, in bytes (ZeRO shards the optimizer over `world` ranks from stage 1, the gradients
from stage 2, the weights at stage 3):

    state       = params x (weights + grads + Adam's two moments [+ fp32 master and grads in bf16])
    activations = layers x (tokens x (ACT_PER_HIDDEN x hidden + ACT_PER_INTER x intermediate) x b
                            + texts x heads x length² x (2 b + 1))
    peak        = state + activations + RUNTIME

with `texts` the texts whose graphs are kept at once — `grad_cache_chunk`, or a whole micro-batch,
batch x (2 + K), when caching is off — `tokens` = texts x max_length (the worst case: every text
at the limit) and b the activation's bytes (4 in fp32, 2 in bf16). The attention term is the
softmax's probabilities and their dropped copy (b each) and the dropout mask (1 byte). The
per-token factors count what a BERT layer saves for backward (q, k, v, the context, two dense
outputs, two layer-norm inputs, dropout masks; the feed-forward's input and GELU output). It is an
estimate, meant to refuse what cannot fit, not to promise what will: the allocator, the tokeniser
and the data come on top, in RUNTIME.

    >>> shape = ModelShape(params=1_000_000, layers=2, hidden=64, heads=4, intermediate=256)
    >>> state_bytes(shape, precision="fp32", zero_stage=0, world=1)
    16000000
"""

from __future__ import annotations

from dataclasses import dataclass

from dualview_core.config import TrainingConfig

GIB = 1024 ** 3
RUNTIME = GIB  # the interpreter, torch, DeepSpeed, the tokeniser, one batch of rows
ACT_PER_HIDDEN = 12  # saved hidden-sized tensors per token per layer
ACT_PER_INTER = 2  # saved intermediate-sized tensors per token per layer
DEFAULT_CHUNK = TrainingConfig.model_fields["grad_cache_chunk"].default  # what a refusal suggests


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a transformer encoder."""

    params: int
    layers: int
    hidden: int
    heads: int
    intermediate: int


@dataclass(frozen=True)
class StepMemory:
    """A step's estimated peak on one rank, by part (bytes)."""

    state: int  # weights, gradients, optimizer
    activations: int  # the graphs kept for one backward
    texts: int  # texts whose graphs those are
    runtime: int = RUNTIME

    @property
    def total(self) -> int:
        return self.state + self.activations + self.runtime


def state_bytes(shape: ModelShape, *, precision: str, zero_stage: int, world: int) -> int:
    """Weights, gradients and AdamW's moments on one rank. bf16 keeps bf16 weights and gradients
    beside fp32 master weights and gradients."""
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"unknown precision {precision!r}")
    weights, grads = (4, 4) if precision == "fp32" else (2 + 4, 2 + 4)
    optimizer = 8  # Adam's exp_avg and exp_avg_sq, fp32
    shard = max(1, world)
    per_param = (optimizer / shard if zero_stage >= 1 else optimizer) \
        + (grads / shard if zero_stage >= 2 else grads) + (weights / shard if zero_stage >= 3 else weights)
    return int(shape.params * per_param)


def activation_bytes(shape: ModelShape, *, texts: int, max_length: int, precision: str) -> int:
    """The graph of `texts` texts at `max_length` tokens each, kept for backward."""
    b = 4 if precision == "fp32" else 2
    tokens = texts * max_length
    per_layer = tokens * (ACT_PER_HIDDEN * shape.hidden + ACT_PER_INTER * shape.intermediate) * b \
        + texts * shape.heads * max_length ** 2 * (2 * b + 1)
    return shape.layers * per_layer


def graph_texts(*, grad_cache_chunk: int | str, batch_size: int, negatives: int) -> int:
    """Texts whose graphs a step keeps at once: one chunk, or all of a micro-batch (its queries,
    positives and K negatives each) without gradient caching; `auto` at the least, one text (it
    is sized to what fits once the model is loaded)."""
    whole = batch_size * (2 + negatives)
    if grad_cache_chunk == "auto":
        return 1
    return min(grad_cache_chunk, whole) if grad_cache_chunk else whole


def step_memory(shape: ModelShape, *, grad_cache_chunk: int | str, batch_size: int, negatives: int, max_length: int,
                precision: str, zero_stage: int, world: int) -> StepMemory:
    texts = graph_texts(grad_cache_chunk=grad_cache_chunk, batch_size=batch_size, negatives=negatives)
    return StepMemory(state_bytes(shape, precision=precision, zero_stage=zero_stage, world=world),
                      activation_bytes(shape, texts=texts, max_length=max_length, precision=precision), texts)


HEADROOM = 0.9  # share of the available memory a sized chunk may plan to use


def sized_chunk(shape: ModelShape, available: int, *, batch_size: int, negatives: int, max_length: int,
                precision: str, zero_stage: int, world: int, headroom: float = HEADROOM) -> int:
    """The gradient-cache chunk `auto` becomes: 0 (no caching) when a whole micro-batch's graphs fit
    beside the state and the runtime in `headroom` of `available` bytes, else the most texts whose
    graphs do (at least 1: the pre-flight check refuses what even that cannot fit).

        >>> shape = ModelShape(params=110_000_000, layers=12, hidden=768, heads=12, intermediate=3072)
        >>> sizes = dict(batch_size=64, negatives=15, max_length=256, precision="bf16", zero_stage=0, world=1)
        >>> sized_chunk(shape, 80 * GIB, **sizes), sized_chunk(shape, 16 * GIB, **sizes)
        (523, 86)
        >>> sized_chunk(shape, 80 * GIB, **(sizes | {"batch_size": 8, "negatives": 3}))  # 40 texts fit whole
        0
    """
    budget = int(available * headroom) - state_bytes(shape, precision=precision, zero_stage=zero_stage, world=world) - RUNTIME
    per_text = activation_bytes(shape, texts=1, max_length=max_length, precision=precision)
    whole = batch_size * (2 + negatives)
    if per_text * whole <= budget:
        return 0
    return max(1, budget // per_text)


def gib(n: int) -> str:
    """
    >>> gib(3 * GIB // 2)
    '1.5 GiB'
    """
    return f"{n / GIB:.1f} GiB"


def shortfall(need: StepMemory, available: int, *, where: str, grad_cache_chunk: int | str, max_length: int) -> str | None:
    """None when the step fits in `available` bytes; else the one line that says what to change."""
    if need.total <= available:
        return None
    advice = (f"lower --grad-cache-chunk (now {grad_cache_chunk}) or --max-length (now {max_length})"
              if grad_cache_chunk else f"turn on gradient caching (--grad-cache-chunk {DEFAULT_CHUNK}) or lower --max-length "
              f"(now {max_length})")
    return (f"a training step needs about {gib(need.total)} per rank (weights, gradients and optimizer "
            f"{gib(need.state)}, activations of {need.texts} texts at {max_length} tokens "
            f"{gib(need.activations)}, runtime {gib(need.runtime)}) but {where} has {gib(available)} "
            f"available; {advice}")
