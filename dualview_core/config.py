"""Typed configuration: one pydantic model per stage, each field documenting its trade-off.

Flows take these models as parameters, so Prefect validates them and its UI renders them as forms.
Environment variables are read at the edges (tasks, CLI), never here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dualview_core.model_folder import POOLING_MODES

Pooling = Literal[POOLING_MODES]  # sentence-transformers' pooling modes, one owner: model_folder


SECRET_WORDS = ("key", "secret", "token", "password", "credential", "authorization")


def is_secret_name(name: str) -> bool:
    """Whether a setting's name says it holds a credential (key, secret, token, ...). A name ending in
    `_env` (api_key_env) names the environment variable that holds one, which is not a secret.

        >>> is_secret_name("aws_secret_access_key"), is_secret_name("api_key_env"), is_secret_name("endpoint_url")
        (True, False, False)
    """
    name = name.lower()
    return any(word in name for word in SECRET_WORDS) and not name.endswith("_env")


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ValidationConfig(_Config):
    """How strict seed validation is. Rejected rows are quarantined, never dropped."""

    max_passage_chars: int = Field(
        20_000,
        gt=0,
        description="Passages longer than this are quarantined. Promptriever passages are MS MARCO "
        "sized (< 2k chars); a huge passage is usually a parsing accident and would be truncated "
        "to the encoder's max length anyway.",
    )
    max_query_chars: int = Field(
        4_000, gt=0, description="Queries (without instruction) longer than this are quarantined."
    )
    batch_rows: int = Field(
        2_048,
        gt=0,
        description="Rows per streamed batch; a batch is held as Python objects while it is checked. "
        "Synthesis of 100k realistic rows (~6.6k characters of passages each) peaks at 475 MB with 2,048 "
        "and 697 MB with 8,192, in the same time.",
    )


class SeedSource(_Config):
    """Where seed rows come from."""

    path: str = Field(
        description="Local path or s3:// URL of a Parquet file, a JSONL file, a folder of either, "
        "or a `datasets.save_to_disk` folder."
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec options for remote paths (e.g. endpoint_url). Credentials belong in "
        "the environment or a secret store, not here.",
    )


# --- synthesis ----------------------------------------------------------------------------------


class GuardConfig(_Config):
    """Content rules for a synthesized instruction (see parsing.guard)."""

    max_sentences: int = Field(
        2, ge=1, description="The method asks for one or two imperative sentences; longer answers are "
        "usually the model explaining itself."
    )
    max_chars: int = Field(
        400, gt=0, description="A hard length bound, for run-on sentences the sentence count misses."
    )
    max_similarity: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Word-sequence similarity to the original instruction at or above which the new "
        "one counts as a rewording. Lower is stricter (more rejections, more diverse instructions).",
    )


class SamplingConfig(_Config):
    """Decoding settings. They are part of every cache key: change one and answers are redone."""

    temperature: float = Field(0.0, ge=0, description="0 = greedy: reproducible answers, and a re-run costs nothing.")
    max_tokens: int = Field(
        1024, gt=0, description="Room for the answer (and any reasoning before it). Too small truncates answers."
    )
    repetition_penalty: float = Field(1.0, gt=0, description=">1 discourages loops; tiny models need it.")
    stop: tuple[str, ...] = Field((), description="Stop strings; with a prefill, stop at the closing tag.")
    prefill: str = Field(
        "",
        description="Text the assistant's reply is made to start with (e.g. '<answer><new_instruction>'). "
        "Keeps small models in the answer format; large models do not need it.",
    )
    seed: int = Field(0, description="Sampling seed, for temperature > 0.")

    def engine_params(self) -> dict:
        """The parameters an engine receives (the prefill is part of the messages, not of these)."""
        params = {"temperature": self.temperature, "max_tokens": self.max_tokens,
                  "repetition_penalty": self.repetition_penalty, "seed": self.seed}
        return params | ({"stop": list(self.stop)} if self.stop else {})


class VLLMEngineConfig(_Config):
    """vLLM through Ray Data's LLM processor. Defaults: the CPU profile (laptops, CI)."""

    model: str = Field(
        "smollm2",
        description="A Hugging Face id or folder. 'smollm2' is the packaged SmolLM2-135M-Instruct, converted "
        "once from GGUF into a cached folder. Production: Qwen/Qwen3-Next-80B-A3B-Instruct.",
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per replica; 4 for the 80B model in BF16 on 80 GB GPUs.")
    replicas: int = Field(1, ge=1, description="Engine replicas (data parallel). Each takes tensor_parallel_size GPUs.")
    batch_size: int = Field(
        8, gt=0, description="Rows per engine batch. Small, so that one long answer holds up few others: a batch "
        "goes back to Ray Data only when its last row is done. (On 2 CPU cores 8 x 2 and 4 x 4 answer at the same "
        "rate: 2.00 and 1.92 rows/s in steady state, benchmarks/synthesis_overhead.py.)",
    )
    max_concurrent_batches: int = Field(
        2, gt=0, description="Batches in flight per replica. batch_size x this is what the engine can decode at "
        "once; it must reach max_num_seqs, or the engine waits for rows while it has room.",
    )
    max_num_seqs: int | None = Field(
        16, gt=0, description="Sequences vLLM decodes together (its own default: None). CPU profile: 16; a 1 GiB KV cache "
        "holds 23k tokens of the packaged model, ~19 rows of ~1.2k tokens. Production: 512, ~0.1 GiB each of the "
        "~139 GiB a TP-4 replica has left for caches.",
    )
    dtype: str = Field("float32", description="float32 on CPU (bfloat16 flips greedy answers of tiny models); bfloat16 on GPU.")
    enforce_eager: bool = Field(True, description="No CUDA graphs / compilation: required on CPU, slower on GPU.")
    max_model_len: int = Field(2048, gt=0, description="Prompt + answer tokens. The prompt with 3 passages is ~1.2k tokens.")
    enable_prefix_caching: bool = Field(
        True, description="Reuse the static prompt prefix across rows. Hybrid models (Qwen3-Next) may not support it."
    )
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="GPU only: share of memory vLLM may take.")
    cpu: bool = Field(
        True,
        description="CPU profile: a 1-CPU placement bundle for the engine, 0.1 CPU for every helper stage "
        "(on 2 cores, whole-CPU stages deadlock), vLLM tokenizing in the engine and using every core.",
    )
    kv_cache_gib: int = Field(1, gt=0, description="CPU only: KV-cache budget (VLLM_CPU_KVCACHE_SPACE).")

    @model_validator(mode="after")
    def _engine_can_be_fed(self) -> VLLMEngineConfig:
        """Ray's guidance for its vLLM stage: small batches, enough of them in flight to fill the engine."""
        in_flight = self.batch_size * self.max_concurrent_batches
        if self.max_num_seqs is not None and in_flight < self.max_num_seqs:
            raise ValueError(f"vllm: batch_size {self.batch_size} x max_concurrent_batches {self.max_concurrent_batches} "
                             f"= {in_flight} rows in flight, but the engine decodes up to max_num_seqs {self.max_num_seqs} "
                             f"at once: raise max_concurrent_batches to {-(-self.max_num_seqs // self.batch_size)}")
        return self


class OpenAIEngineConfig(_Config):
    """Any OpenAI-compatible chat endpoint (e.g. a vLLM server)."""

    base_url: str = Field("http://127.0.0.1:8000/v1", description="Endpoint root, ending in /v1.")
    base_urls: tuple[str, ...] = Field(
        (), description="Several endpoint roots serving the same model; when set, they replace `base_url`. Each "
        "row goes to one, picked from its cache key (a re-run asks the same one); each retry moves to the next, "
        "so the rows of an endpoint that fails are answered by the others. Not part of the cache key.",
    )
    actors: int = Field(
        1, gt=0, description="Engine actors, each with its own connection pool and `concurrency` requests in "
        "flight (actors x concurrency in all). More actors spread the client's CPU over cores and nodes; each "
        "asks Ray for a tenth of a CPU, so they never starve Ray Data's other stages on a small machine.",
    )
    model: str = Field("smollm2", description="The served model name; it is part of every cache key.")
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Name of the environment variable holding the API key (the key itself never enters "
        "config, logs or outputs). Unset = no Authorization header.",
    )
    concurrency: int = Field(8, gt=0, description="Requests in flight. Match it to what the server can batch.")
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout, seconds.")
    max_attempts: int = Field(4, ge=1, description="Tries per row on timeouts, connection errors, 429 and 5xx.")
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles per attempt, with jitter.")
    context_length: int | None = Field(
        None, gt=0, description="The served model's context (prompt + answer tokens). With `tokenizer`, a row "
        "whose prompt + max_tokens exceeds it is rejected (prompt_too_long) without a call. None: not checked "
        "here; the server's own refusal is recorded as prompt_too_long.",
    )
    tokenizer: str | None = Field(
        None, description="A Hugging Face tokenizer (id, folder, or 'smollm2') matching the served model, used "
        "with its chat template to count prompt tokens for `context_length`.",
    )

    @model_validator(mode="after")
    def _distinct_endpoints(self) -> OpenAIEngineConfig:
        roots = [u.rstrip("/") for u in self.base_urls]
        if len(set(roots)) != len(roots) or not all(roots):
            raise ValueError(f"openai.base_urls must be distinct, non-empty endpoint roots, got {list(self.base_urls)}")
        return self

    def endpoints(self) -> tuple[str, ...]:
        """The endpoint roots rows are spread over, without a trailing slash: `base_urls`, else `base_url`."""
        return tuple(u.rstrip("/") for u in self.base_urls or (self.base_url,))


class ReferenceEngineConfig(_Config):
    """The reference engine, for controlled benchmarks only (the method check): it writes the known
    correct reversed instruction from a world's metadata (`dualview_core.world`), not from a model."""

    world: str | None = Field(
        None, description="The world.json written with the seeds (`World.write`). Seeds it does not "
        "describe get an engine error, never an invented answer.",
    )


class RayJobConfig(_Config):
    """Synthesis submitted as a Ray Job: the driver runs on the cluster (its head, by Ray's default),
    and the Prefect task only submits it, follows its status and log, and reads the summary the run
    wrote under `out`. A submitting pod that goes away loses nothing; the job runs on."""

    address: str = Field(
        description="The cluster's job API (the dashboard), e.g. http://dualview-head-svc.dualview.svc.cluster.local:8265.",
    )
    poll_s: float = Field(2.0, gt=0, description="Seconds between two looks at the job's status and log.")
    tail_lines: int = Field(
        40, gt=0, description="Log lines quoted in the error when the job fails (the traceback's end is there).",
    )


class SynthesisConfig(_Config):
    """Polarity-reversal synthesis: which engine, how to decode, what to accept."""

    engine: Literal["vllm", "openai", "reference"] = Field(
        "vllm", description="Which engine writes the instructions. 'reference' exists only for controlled "
        "benchmarks whose correct answers are known (benchmarks/method_check.py), never for real seeds.",
    )
    vllm: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig)
    openai: OpenAIEngineConfig = Field(default_factory=OpenAIEngineConfig)
    reference: ReferenceEngineConfig = Field(default_factory=ReferenceEngineConfig)
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(
            max_tokens=64, repetition_penalty=1.15, prefill="<answer><new_instruction>",
            stop=("</new_instruction>", "</answer>", "\n\n"),
        ),
        description="Defaults suit the tiny CPU model; profiles/cluster.yaml has the 80B model's.",
    )
    guards: GuardConfig = Field(default_factory=GuardConfig)
    verify: bool = Field(
        False, description="A second call per accepted row asking the model whether the new positive meets "
        "I_new, the old positive breaks it, and I_new stays on the query's topic; rows it does not confirm "
        "are rejected (unverified). Roughly doubles the cost of accepted rows; cached like the first pass.",
    )
    verify_sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(max_tokens=48, repetition_penalty=1.15, prefill="<verdict>",
                                               stop=("</verdict>",)),
        description="Decoding of the verification pass. Part of its cache key.",
    )
    max_error_runs: int = Field(
        3, ge=1, description="Runs in which a row may fail transiently (timeouts, a dead engine) before its "
        "failure is final (engine_error). Higher keeps retrying a flaky row; lower gives up sooner.",
    )
    per_negative: bool = Field(
        False, description="One reversed view per instruction negative, instead of the paper's one per seed (N* = first)."
    )
    geometry_filter: bool = Field(
        False,
        description="Keep a row only if sim(q ⊕ I_new, N*) − sim(q, N*) > 0 under a frozen encoder. Costs an "
        "encoder pass per row; drops instructions the encoder reads the wrong way.",
    )
    geometry_encoder: str = Field("minilm", description="The frozen encoder for the geometry filter.")
    count_prompt_tokens: bool = Field(
        True, description="Count each prompt with the engine's tokenizer before sending it, and reject the rows "
        "whose prompt + max_tokens cannot fit the context (prompt_too_long, no call). Off: no tokenizer pass over "
        "the rows; the engine's own refusal of an over-long prompt is recorded as prompt_too_long instead, and a "
        "prompt that fits but leaves less room than max_tokens gets a shorter answer.",
    )
    limit: int | None = Field(None, gt=0, description="Use only the first N eligible seeds (smoke runs).")
    shard_rows: int = Field(
        1024, gt=0, description="Rows per output shard (a small run writes smaller ones, down to 16 rows, so that "
        "it publishes eight and its progress moves). Smaller shards lose less work to a crash; more files."
    )
    ray_address: str | None = Field(None, description="Ray cluster address; None starts a local Ray.")
    ray_job: RayJobConfig | None = Field(
        None, description="Submit the run as a Ray Job to this cluster instead of driving it from this process; "
        "the job's driver joins the cluster it runs in (leave ray_address unset). Prefect flows only; the CLI "
        "is always its own driver.",
    )
    model_cache_dir: str = Field(".cache/models", description="Where packaged models are converted and cached.")

    @model_validator(mode="after")
    def _one_driver(self) -> SynthesisConfig:
        if self.ray_job is not None and self.ray_address is not None:
            raise ValueError("ray_job runs the driver inside the cluster, which it joins by itself: leave ray_address "
                             f"unset (got {self.ray_address!r})")
        return self

    @model_validator(mode="after")
    def _reference_needs_no_verifier(self) -> SynthesisConfig:
        if self.engine == "reference" and self.verify:
            raise ValueError("verify asks a model to check answers; the reference engine's answers are known "
                             "correct and it has no model: turn verify off")
        return self

    def model_id(self) -> str:
        return {"vllm": self.vllm.model, "openai": self.openai.model, "reference": "reference"}[self.engine]


# --- training -----------------------------------------------------------------------------------


class MixtureConfig(_Config):
    """Which rows a model trains on. The paper's claim is about data composition, so the four
    configurations are size-matched by substitution and deterministic under `seed`."""

    name: Literal["ins-orig", "ins-dv", "all-orig", "all-dv", "ratio"] = Field(
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


class TrainingConfig(_Config):
    """The bi-encoder, the loss, the negatives and the DeepSpeed engine. Defaults are the paper's
    (InfoNCE, τ = 0.02, 30 hard negatives, 512 tokens, query ⊕ instruction)."""

    mixture: MixtureConfig = Field(default_factory=MixtureConfig, description="The training rows.")
    model: str = Field(
        "minilm", description="Hugging Face model folder or id ('minilm' is the packaged MiniLM-L6 "
        "for CPU and tests; production uses e.g. gte-multilingual-mlm-base or bge-m3).",
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
    grad_cache_chunk: int = Field(
        8, ge=0, description="Texts whose activations are kept at once (gradient caching): a step "
        "embeds all its texts without graphs, takes the loss's gradient w.r.t. the embeddings, then "
        "re-encodes this many texts at a time with their graphs. Peak memory follows the chunk, not "
        "batch x (1 + K); the gradients are the uncached step's; it costs one extra forward pass. "
        "0: off (every text's graph kept until the backward pass, chunks of encode_chunk). 8 keeps a "
        "MiniLM step at 512 tokens near 3 GiB on CPU; on a GPU a larger chunk (e.g. 64) is faster.",
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
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 on GPU, fp32 on CPU (CPU bf16 is slow and lossy).",
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


# --- evaluation ---------------------------------------------------------------------------------


class EvaluationConfig(_Config):
    """How a model is evaluated: retrieval, the headline measures, and their uncertainty."""

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
    score_measures: dict[str, str] = Field(
        default_factory=lambda: {"robust04": "map_cut_1000", "core17": "map_cut_1000", "news21": "ndcg_cut_5"},
        description="FollowIR Score measure per subset: the first key contained in the eval set's "
        "(lower-cased) name wins. Defaults are FollowIR's published choice.",
    )
    default_score_measure: str = Field(
        "map_cut_1000", description="Score measure for an eval set that no key of score_measures names.",
    )
    bootstrap_resamples: int = Field(
        1000, ge=0, description="Bootstrap resamples for confidence intervals (0 disables them). "
        "More give steadier interval ends and cost time linearly.",
    )
    bootstrap_seed: int = Field(0, description="Seed of the bootstrap and the paired test; fixed for reproducible intervals.")
    confidence: float = Field(
        0.95, gt=0, lt=1, description="Two-sided confidence level of the percentile intervals.",
    )


# --- orchestration ------------------------------------------------------------------------------


def _bundled_seeds() -> SeedSource:
    from dualview_core import samples

    return SeedSource(path=samples.seeds_path())


def _bundled_eval_set() -> SeedSource:
    from dualview_core import samples

    return SeedSource(path=samples.followir_path())


def _demo_training() -> TrainingConfig:
    # Small enough for 2 CPU cores in about two minutes (a step is ~12 s; the loss is near 0 by step
    # 10 on the sample); the paper's values stay the defaults of TrainingConfig itself (τ, K,
    # template). all-dv: the instruct rows plus their dual views.
    return TrainingConfig(mixture=MixtureConfig(name="all-dv"), max_length=128, batch_size=8, max_steps=12,
                          learning_rate=5e-5, eval_every=6)


class PipelineConfig(_Config):
    """synthesize → mixture → train → evaluate (trained and base), tracked as one MLflow parent run."""

    name: str = Field("dualview", description="MLflow experiment: runs of one pipeline name compare side by side.")
    seeds: SeedSource = Field(default_factory=_bundled_seeds, description="Seed rows (Promptriever format).")
    eval_set: SeedSource = Field(default_factory=_bundled_eval_set, description="A FollowIR-style eval-set folder.")
    workdir: str = Field(
        ".cache/runs", description="Where outputs go (local or s3://): synthesis/ is shared across runs (it is "
        "content-addressed); models/ and eval/ get one folder per run."
    )
    workdir_storage_options: dict[str, Any] | None = Field(
        None, description="fsspec options for an s3:// workdir (e.g. endpoint_url); None: the seeds' options. "
        "Credentials come from the environment."
    )
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)
    training: TrainingConfig = Field(default_factory=_demo_training)
    evaluation: EvaluationConfig = Field(default_factory=lambda: EvaluationConfig(max_length=128))
    train_processes: int = Field(1, ge=1, description="DeepSpeed ranks: 1 in-process; more under the launcher.")
    tracking_uri: str = Field(
        "sqlite:///.cache/mlflow/mlflow.db", description="MLflow tracking store: a SQLite file in the project "
        "by default, or a server URL (credentials from the environment, never here)."
    )
    artifact_location: str | None = Field(
        ".cache/mlflow/artifacts", description="Where a new experiment keeps artifacts (local path or s3://); "
        "None lets a tracking server decide."
    )

    def output_options(self) -> dict:
        return dict(self.workdir_storage_options if self.workdir_storage_options is not None else self.seeds.storage_options)


class SweepConfig(_Config):
    """A grid over mixtures, non-instruct ratios and seeds; one nested MLflow run per point."""

    pipeline: PipelineConfig = Field(default_factory=lambda: PipelineConfig(name="dualview-sweep"))
    mixtures: tuple[Literal["ins-orig", "ins-dv", "all-orig", "all-dv", "ratio"], ...] = Field(
        ("ratio",), description="Mixtures to train. 'ratio' is expanded over `ratios`."
    )
    ratios: tuple[float, ...] = Field(
        (0.0, 0.25, 0.5), description="Fractions of non-instruct rows for the ratio mixture (the paper tried only 0.5)."
    )
    seeds: tuple[int, ...] = Field((0,), description="Random seeds per point: more seeds, tighter comparisons.")
    total: int | None = Field(None, gt=0, description="Rows per ratio mixture (fixed total); None: the data decides.")


# --- cluster ------------------------------------------------------------------------------------


def _cluster_profile() -> PipelineConfig:
    from dualview_core.profiles import resolve  # profiles/cluster.yaml is the one source of these values

    return resolve("cluster")


def _cluster_synthesis() -> SynthesisConfig:
    """What the GPU worker group runs: the cluster profile's engine, without how a run reaches Ray
    (`dualview_core.cluster.pipeline_config` adds that from `ray_mode`)."""
    return _cluster_profile().synthesis.model_copy(update={"ray_job": None, "ray_address": None})


class ClusterSecrets(_Config):
    """Names of the Kubernetes Secrets the manifests reference. Values never enter config, images or
    manifests; each description lists the keys the Secret must hold."""

    s3: str = Field(
        "dualview-s3", description="AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (+ AWS_ENDPOINT_URL_S3 for an "
        "S3-compatible store). Where the cluster has workload identity (IRSA, GKE WI), prefer it and leave this empty.",
    )
    huggingface: str = Field(
        "dualview-hf", description="HF_TOKEN, for gated models. Optional: Qwen3-Next is not gated, so pods start without it.",
    )
    mlflow_client: str = Field(
        "dualview-mlflow-client", description="MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD of the user flow "
        "runs and the trainer log as. A user of its own, not the admin: it can be revoked alone.",
    )
    mlflow_server: str = Field(
        "dualview-mlflow-server", description="MLFLOW_AUTH_ADMIN_USERNAME, MLFLOW_AUTH_ADMIN_PASSWORD, "
        "MLFLOW_FLASK_SERVER_SECRET_KEY. The admin password only seeds the first start; rotate it through MLflow.",
    )
    postgres: str = Field(
        "dualview-postgres", description="POSTGRES_PASSWORD of the one role owning the MLflow and Prefect databases. "
        "A managed database can give each service its own role; then split this Secret.",
    )
    prefect: str = Field(
        "dualview-prefect", description="PREFECT_API_AUTH_STRING ('user:password'): the server checks it, the "
        "worker and flow runs send it.",
    )
    ray: str = Field(
        "dualview-ray-auth", description="auth_token, KubeRay's token authentication (clients send it as "
        "RAY_AUTH_TOKEN). Without it anything that reaches the head can run code on the GPUs.",
    )


class ClusterConfig(_Config):
    """The Kubernetes deployment: images, Ray worker groups, the trainer's GPUs and secret names.
    The manifests in infra/ carry these values and tests/unit/test_infra*.py fail when the two drift;
    `dualview_core.cluster` derives service addresses and checks the sizing arithmetic."""

    namespace: str = Field(
        "dualview", description="Namespace of every dualview object. One namespace keeps Secrets and RBAC local; "
        "service addresses contain it.",
    )
    registry: str = Field(
        "ghcr.io/dualview", description="Prefix of the dualview images. A private registry needs an "
        "imagePullSecret on the namespace's service accounts.",
    )
    image_tag: str = Field(
        "0.1.0", description="Tag of every dualview image: the project version. Never 'latest': nodes cache tags, "
        "so a moved tag runs old code on some nodes and new code on others.",
    )
    ray_cluster: str = Field(
        "dualview", max_length=53, description="RayCluster name; KubeRay names the head Service '<name>-head-svc'.",
    )
    ray_mode: Literal["client", "job"] = Field(
        "job", description="How synthesis reaches Ray. job (profiles/cluster.yaml): the driver runs on the head, "
        "submitted over the dashboard's job API; sturdy for the 480k-row run, and the submitting pod may come and "
        "go. client: the flow run is the driver, over ray://; every row and answer crosses one gRPC connection, "
        "and losing it loses the run.",
    )
    synthesis: SynthesisConfig = Field(
        default_factory=_cluster_synthesis, description="What the GPU worker group runs. Its tensor_parallel_size "
        "and replicas size the GPU pods.",
    )
    training: TrainingConfig = Field(
        default_factory=lambda: _cluster_profile().training,
        description="What the training pod runs (profiles/cluster.yaml): bge-m3 (568M parameters) as DESIGN.md suggests. ZeRO-2 shards "
        "optimizer state and gradients over the ranks: room for larger batches (more in-batch negatives) for a "
        "little communication; bf16 on GPU.",
    )
    gpu_product: str = Field(
        "NVIDIA-H100-80GB-HBM3", description="Value of the node label nvidia.com/gpu.product (NVIDIA GPU feature "
        "discovery) that GPU pods select, so a replica never lands on smaller GPUs.",
    )
    gpu_memory_gib: int = Field(
        80, gt=0, description="Memory of one GPU of that product. With the model's size it fixes the smallest "
        "tensor-parallel degree (dualview_core.cluster.min_tensor_parallel).",
    )
    gpus_per_ray_worker: int = Field(
        4, gt=0, description="GPUs of one Ray GPU worker pod: a multiple of tensor_parallel_size, so a replica's "
        "GPUs share a node (NVLink) instead of talking over the network.",
    )
    gpu_workers_max: int = Field(
        4, ge=0, description="Autoscaling ceiling of the GPU group, and so the GPU cost ceiling "
        "(gpus_per_ray_worker x this).",
    )
    gpu_workers_min: int = Field(
        0, ge=0, description="GPU pods kept when idle. 0 releases GPUs between runs; every scale-up then loads "
        "~160 GB of weights again (minutes).",
    )
    cpu_workers_max: int = Field(
        8, ge=0, description="Autoscaling ceiling of the CPU group (Ray Data's read, chat-template and tokenize stages).",
    )
    idle_timeout_s: int = Field(
        600, ge=0, description="Seconds a Ray worker pod may idle before the autoscaler removes it. Shorter saves "
        "GPU hours; longer keeps weights loaded across back-to-back runs.",
    )
    trainer_gpus: int = Field(
        4, gt=0, description="GPUs of the training pod, one DeepSpeed rank each (`dualview train --processes`). "
        "One node: the launcher is not set up to span pods.",
    )
    secrets: ClusterSecrets = Field(default_factory=ClusterSecrets, description="Secret names the manifests reference.")
