"""Evaluation: retrieval, FollowIR's measures and their uncertainty. The `evaluate` flow's form."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dualview_core.config.base import ConfigModel, Pooling


class EvaluationConfig(ConfigModel):
    """How a model is evaluated: retrieval, the headline measures, and their uncertainty."""

    suite: str | None = Field(
        None, description="A catalog suite or task (followir, infosearch, mair, paper, robust04, ...): "
        "the eval set's path is then the folder `dualview data get` wrote, one subfolder per task. "
        "None: the path is one task's folder.",
    )
    device: str = Field(
        "auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="Where the encoder runs: auto (the first CUDA "
        "device when there is one, else the CPU), cpu, cuda or cuda:N. Scores are computed in fp32 on the host.",
    )
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="The encoder's weights and activations: auto (bf16 on CUDA, fp32 on the CPU), fp32, "
        "bf16 or fp16. Embeddings are cast to fp32 before scoring; a lower precision moves scores by a little "
        "and can swap near-tied documents (tests/helpers/precision.py states how little).",
    )
    batch_size: int = Field(
        64, gt=0, description="Texts per encoder batch. Larger is faster until memory runs out; "
        "batches are length-sorted, so padding stays small either way.",
    )
    max_length: int = Field(
        512, gt=0, description="Tokens kept per text, at most the model folder's own max_seq_length. "
        "FollowIR documents are news articles: a short limit is faster but scores a truncated document.",
    )
    pooling: Pooling | None = Field(
        None, description="Pooling of token states. None: what the model folder declares; a plain "
        "Hugging Face folder (no modules.json) has none and gets mean unless this says otherwise.",
    )
    query_template: str = Field(
        "{query} {instruction}", description="How a query and its instruction become one string "
        "(placeholders {query} and {instruction}). Must match what the model was trained with.",
    )
    top_k: int | None = Field(
        1000, gt=0, description="Documents kept per query when ranking the whole corpus (no "
        "candidate lists). MAP@1000 needs 1000; None keeps all, which is exact for p-MRR's "
        "missing-document rule but writes larger runs.",
    )
    search: str = Field(
        "exact", pattern="^(exact|faiss)$", description="'exact': brute-force cosine in numpy, "
        "always right. 'faiss': a FAISS index (optional package) for corpora too big to score "
        "densely; approximate unless faiss_factory is 'Flat'. Candidate lists always use exact.",
    )
    faiss_factory: str = Field(
        "Flat", description="FAISS index_factory string, e.g. 'Flat' (exact), 'HNSW32' (fast, "
        "approximate). Only read when search is 'faiss'.",
    )
    query_chunk: int = Field(
        1024, gt=0, description="Queries scored against the corpus at once in exact search: "
        "bounds memory at query_chunk × corpus size floats.",
    )
    default_score_measure: str = Field(
        "map_cut_1000", description="Score measure of a folder the catalog does not name (a catalog task "
        "brings its own: MAP@1000, or nDCG@5 on News21).",
    )
    bootstrap_resamples: int = Field(
        1000, ge=0, description="Bootstrap resamples for confidence intervals (0 disables them). "
        "More give steadier interval ends and cost time linearly.",
    )
    strict: bool = Field(
        False, description="Refuse an eval set any of whose rows (documents, queries, judgments) were "
        "quarantined, instead of scoring without them. Off, the dropped rows are counted in the report.",
    )
    bootstrap_seed: int = Field(0, description="Seed of the bootstrap and the paired test; fixed for reproducible intervals.")
    confidence: float = Field(
        0.95, gt=0, lt=1, description="Two-sided confidence level of the percentile intervals.",
    )
