"""Training: which rows (the mixture), the bi-encoder, the loss and the DeepSpeed engine. The
`train` flow's form."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from dualview_core.config.base import ConfigModel, Pooling

MixtureName = Literal["ins-orig", "ins-dv", "all-orig", "all-dv", "ratio"]


class MixtureConfig(ConfigModel):
    """Which rows a model trains on. The paper's claim is about data composition, so the four
    configurations are size-matched by substitution and deterministic under `seed`."""

    name: MixtureName = Field(
        "ins-dv", description="ins-orig: N instruct rows. ins-dv: N/2 seeds, each with its original "
        "row and its dual view (same volume, half the distinct queries). all-orig: N instruct rows "
        "plus their N non-instruct twins. all-dv: N instruct rows plus their N dual views. ratio: a "
        "fixed total with a fraction of non-instruct rows.",
    )
    size: int | None = Field(
        None, gt=0, description="N, the instruct-row budget. None: the largest N every configuration "
        "can reach on this data (rounded down to even), so runs of different mixtures compare at "
        "one budget; a fixed N fails clearly when a mixture cannot reach it.",
    )
    ratio: float = Field(
        0.5, ge=0, le=1, description="ratio mixture only: the fraction of non-instruct rows. 0 is "
        "instruct-only; 0.5 with total 2N is all-orig. The paper only tried 0 and 0.5.",
    )
    total: int | None = Field(
        None, gt=0, description="ratio mixture only: rows in total. None: N, which every ratio can reach.",
    )
    corruption: float = Field(
        0.0, ge=0, le=1, description="Fraction of dual-view rows whose instruction is replaced with "
        "another seed's (a robustness ablation). 0 trains on clean data; only mixtures with dual views.",
    )
    heldout_fraction: float = Field(
        0.1, ge=0, lt=1, description="Fraction of dual-view seeds kept out of every mixture (all "
        "their rows) for the instruction-separation diagnostic. More gives a steadier diagnostic "
        "and leaves less training data.",
    )
    seed: int = Field(0, description="Seed of row selection, held-out split and corruption.")


class TrainingConfig(ConfigModel):
    """The bi-encoder, the loss, the negatives and the DeepSpeed engine. Defaults are the paper's
    (InfoNCE, τ = 0.02, 30 hard negatives, 512 tokens, query ⊕ instruction)."""

    mixture: MixtureConfig = Field(default_factory=MixtureConfig, description="The training rows.")
    model: str = Field(
        "minilm", description="Hugging Face model folder or id, or a named backbone: 'gte-multilingual-mlm-base' "
        "(the paper's) or 'bge-m3-retromae' (its second table); dualview_core/model.py BACKBONES says where each "
        "comes from and how it pools. 'minilm' is the packaged MiniLM-L6 for CPU and tests.",
    )
    trust_remote_code: bool = Field(
        False, description="Run the model repository's own code, for a hub id or folder whose architecture is "
        "not in transformers (a named backbone that needs it sets this itself). The checkpoint records it and "
        "carries the code, so evaluating it needs nothing more.",
    )
    pooling: Pooling | None = Field(
        None, description="Pooling of token states. None: what the model folder declares (mean for "
        "a plain Hugging Face folder); the checkpoint declares the pooling it was trained with. "
        "bge-m3 was trained with cls, LLM embedders with lasttoken.",
    )
    max_length: int = Field(
        512, gt=0, description="Tokens kept per query and per document, at most the folder's own "
        "max_seq_length. Longer sees more of each passage; cost grows faster than linearly.",
    )
    query_template: str = Field(
        "{query} {instruction}", description="How a query and its instruction become one string. "
        "Evaluation must use the same template.",
    )
    negatives: int = Field(
        30, ge=0, description="K hard negatives per row, instruction negatives first. More negatives "
        "give a harder contrast and cost one document encoding each.",
    )
    strict_negatives: bool = Field(
        False, description="Fail when a row has fewer than K negatives. Off: such rows use all they have.",
    )
    in_batch_negatives: bool = Field(
        True, description="Also contrast each query with every other row's documents, gathered across "
        "ranks. Free extra negatives; a document equal to the query's positive is never one.",
    )
    temperature: float = Field(
        0.02, gt=0, description="InfoNCE temperature τ. Lower sharpens the softmax onto the hardest negatives.",
    )
    batch_size: int = Field(16, gt=0, description="Rows per micro-batch per rank. Larger gives more in-batch negatives and memory use.")
    encode_chunk: int = Field(
        32, gt=0, description="Texts per encoder call. A micro-batch's texts are sorted by length and "
        "encoded in chunks, each padded only to its own longest: smaller chunks pad less, larger ones "
        "make fewer calls (each gathers the weights under ZeRO-3). Results do not depend on it. "
        "Used when grad_cache_chunk is 0.",
    )
    grad_cache_chunk: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        8, description="Texts whose activations are kept at once (gradient caching): a step "
        "embeds all its texts without graphs, takes the loss's gradient w.r.t. the embeddings, then "
        "re-encodes this many texts at a time with their graphs. Peak memory follows the chunk, not "
        "batch x (1 + K); the gradients are the uncached step's; it costs one extra forward pass. "
        "0: off (every text's graph kept until the backward pass, chunks of encode_chunk). 8 keeps a "
        "MiniLM step at 512 tokens near 3 GiB on CPU by the preflight's estimate (dualview_core/training/"
        "memory.py); on a GPU larger chunks are faster: fewer, fuller encoder calls. auto: each run "
        "sizes it, once its model is loaded, from the memory the device has free (the largest chunk "
        "the estimate fits, 0 when the whole step fits); the smallest any rank can take.",
    )
    grad_accumulation: int = Field(
        1, gt=0, description="Micro-batches per optimizer step. Raises the effective batch without "
        "memory; in-batch negatives still only come from one micro-batch.",
    )
    learning_rate: float = Field(2e-5, gt=0, description="Peak learning rate after warm-up.")
    warmup_ratio: float = Field(
        0.1, ge=0, lt=1, description="Fraction of optimizer steps spent warming up linearly; the rest decays linearly to 0.",
    )
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, ge=0, description="Gradient clipping norm; 0 disables. Guards against spikes at low τ.")
    max_steps: int | None = Field(
        None, gt=0, description="Optimizer steps to run. Set, it wins over epochs (a fixed compute budget).",
    )
    epochs: float = Field(1.0, gt=0, description="Passes over the mixture when max_steps is not set.")
    zero_stage: int = Field(
        0, ge=0, le=3, description="DeepSpeed ZeRO stage. 0 replicates everything (fastest for small "
        "models); 1-2 shard optimizer state and gradients; 3 also shards weights (large models).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where each rank trains: auto is its CUDA device where torch sees one, else the "
        "CPU; cuda where there is none is refused before any data is read. Ranks take one device each "
        "(the launcher's LOCAL_RANK).",
    )
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 on GPU, fp32 on CPU (CPU bf16 is slow and lossy). bf16 keeps fp32 "
        "master weights and sums gradients in fp32. fp16 is not offered: it needs loss scaling, and bf16 "
        "is the GPU precision.",
    )
    seed: int = Field(0, description="Seed of weights' dropout, row order and negative sampling.")
    eval_every: int = Field(
        50, ge=0, description="Optimizer steps between instruction-separation measurements (also at "
        "the start and the end); 0: start and end only.",
    )
    save_every: int = Field(
        500, ge=0, description="Optimizer steps between resumable snapshots (weights, optimizer, "
        "schedule, RNG) in `<out>.state`; a crashed run started again with the same output resumes "
        "from the last one. Each costs a write of about 3x the model's size; 0 never saves (a crash "
        "starts over). Removed once the checkpoint is published.",
    )
