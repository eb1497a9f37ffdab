"""Synthesis: the engines (vLLM, an OpenAI-compatible endpoint, a plugin), decoding,
guards, and how a run reaches Ray. The `synthesize` flow's form."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dualview_core.config.base import ConfigModel


class GuardConfig(ConfigModel):
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


TRUNCATION = ("top_p", "top_k", "min_p")  # sampling knobs that are off at their defaults


class SamplingConfig(ConfigModel):
    """Decoding settings. They are part of every cache key: change one and answers are redone."""

    temperature: float = Field(0.0, ge=0, description="0 = greedy: reproducible answers, and a re-run costs nothing.")
    max_tokens: int = Field(
        1024, gt=0, description="Room for the answer (and any reasoning before it). Too small truncates answers."
    )
    repetition_penalty: float = Field(1.0, gt=0, description=">1 discourages loops; tiny models need it.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: keep the smallest set of tokens whose "
                         "probabilities add up to this (1 = off).")
    top_k: int = Field(0, ge=0, description="Sample among the k most likely tokens only (0 = off).")
    min_p: float = Field(0.0, ge=0, le=1, description="Drop tokens less likely than this times the top token (0 = off).")
    stop: tuple[str, ...] = Field((), description="Stop strings; with a prefill, stop at the closing tag.")
    prefill: str = Field(
        "",
        description="Text the assistant's reply is made to start with (e.g. '<answer><new_instruction>'). "
        "Keeps small models in the answer format; large models do not need it.",
    )
    seed: int = Field(0, description="Sampling seed, for temperature > 0.")

    def engine_params(self) -> dict:
        """The parameters an engine receives (the prefill is part of the messages, not of these). The
        truncation knobs go only where set, so a server that does not know top_k is not sent one."""
        params = {"temperature": self.temperature, "max_tokens": self.max_tokens,
                  "repetition_penalty": self.repetition_penalty, "seed": self.seed}
        params |= self.truncation()
        return params | ({"stop": list(self.stop)} if self.stop else {})

    def truncation(self) -> dict:
        """top_p, top_k and min_p where they differ from off."""
        return {k: getattr(self, k) for k in TRUNCATION if getattr(self, k) != type(self).model_fields[k].default}

    def key(self) -> dict:
        """What the cache key holds of these settings: every field, the truncation knobs only where
        set, so a config that leaves them off keys as one without them."""
        return self.model_dump(mode="json", exclude=set(TRUNCATION)) | self.truncation()


Prompt = Literal["paper", "compact"]  # the polarity-reversal templates (prompts.REVERSAL_PROMPTS)
Filtering = Literal["none", "guards", "verify"]  # which checks may drop a row (SynthesisConfig.filtering)


def prompt_sampling(prompt: str) -> SamplingConfig:
    """The decoding a prompt gets unless a profile says otherwise. The compact prompt's suits the tiny
    CPU model: greedy, a prefill that opens the answer, a stop at its end or at the first line break
    (an instruction is one line; what a small model writes after one is more of the same), and room
    for the replies it writes to end on their own (benchmarks/README.md has the distribution). The
    paper's: no prefill (the reply reasons first), a stop after the answer block, room for the
    reasoning."""
    if prompt == "paper":
        return SamplingConfig(max_tokens=2048, stop=("</answer>",))
    return SamplingConfig(max_tokens=256, repetition_penalty=1.15, prefill="<answer><new_instruction>",
                          stop=("</new_instruction>", "</answer>", "\n"))


class VLLMEngineConfig(ConfigModel):
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
        "goes back to Ray Data only when its last row is done.",
    )
    max_concurrent_batches: int = Field(
        4, gt=0, description="Batches in flight per replica. batch_size x this must be at least twice max_num_seqs: "
        "while some batches wait for their slowest rows, the others' rows keep the engine full; at exactly "
        "max_num_seqs it decodes a few stragglers for long stretches (benchmarks/README.md, synthesis_overhead.py). "
        "Ray's stage hands vLLM at most 1.1 x max_num_seqs of them at once; the rest wait in the stage.",
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
        """Ray's guidance for its vLLM stage: small batches, enough of them in flight to keep the engine
        full while batches wait for their slowest rows."""
        in_flight, wanted = self.batch_size * self.max_concurrent_batches, 2 * (self.max_num_seqs or 0)
        if in_flight < wanted:
            raise ValueError(f"vllm: batch_size {self.batch_size} x max_concurrent_batches {self.max_concurrent_batches} "
                             f"= {in_flight} rows in flight, but an engine that decodes max_num_seqs {self.max_num_seqs} "
                             f"at once needs {wanted} (twice that): raise max_concurrent_batches to "
                             f"{-(-wanted // self.batch_size)}")
        return self


class OpenAIEngineConfig(ConfigModel):
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
    retry_budget_s: float = Field(
        600.0, gt=0, description="Seconds a row may spend waiting between its tries (queueing and requests do not "
        "count). A 429/503 asking to come back "
        "later (Retry-After) is waited for within it; past it the row ends as an engine error, retried next run.",
    )
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


class PluginEngineConfig(ConfigModel):
    """An engine defined outside the project, built in the driver's process: `factory` names a callable
    that takes `options` and returns an object with `answers(rows)` (tasks/synthesis/engines.py says
    what a row and an answer hold). Controlled benchmarks plug their reference engine in this way."""

    factory: str | None = Field(None, description="'package.module:callable' that builds the engine from `options`.")
    options: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the factory.")
    model_id: str = Field("plugin", description="The model id recorded in records; part of every cache key.")
    batch_rows: int = Field(256, gt=0, description="Rows the engine answers at a time (progress moves per batch).")


class RayJobConfig(ConfigModel):
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


class SynthesisConfig(ConfigModel):
    """Polarity-reversal synthesis: which engine, how to decode, what to accept."""

    prompt: Prompt = Field(
        "compact", description="Which polarity-reversal prompt: 'paper' (prompts/polarity_reversal_paper.md: the "
        "model reasons through five steps, then answers; needs a capable model and room in max_tokens for the "
        "reasoning) or 'compact' (prompts/polarity_reversal.md: the answer only, with an example; for small models)."
    )
    rationale: str = Field(
        "", description="Why this prompt and sampling were chosen, in a sentence: recorded in the run's summary "
        "and its MLflow params next to them."
    )
    engine: Literal["vllm", "openai", "plugin"] = Field(
        "vllm", description="Which engine writes the instructions: vLLM through Ray Data, any OpenAI-compatible "
        "endpoint, or a plugin named in `plugin` (controlled benchmarks use one that knows the answers).",
    )
    vllm: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig)
    openai: OpenAIEngineConfig = Field(default_factory=OpenAIEngineConfig)
    plugin: PluginEngineConfig = Field(default_factory=PluginEngineConfig)
    sampling: SamplingConfig = Field(
        default_factory=lambda: prompt_sampling("compact"),
        description="Defaults suit the tiny CPU model and the compact prompt; profiles/cluster.yaml has the 80B "
        "model's for the paper's prompt.",
    )
    guards: GuardConfig = Field(default_factory=GuardConfig)
    filtering: Filtering = Field(
        "guards", description="Which rows an answer's checks may drop. 'none' (the paper's choice): only replies "
        "with no parseable answer, None, a truncated reply or a failed call; 'guards': also the content guards "
        "(length, sentences, a copy of the query, talk about the task, near copies of the original instruction); "
        "'verify': the guards, then a second call per accepted row asking the model whether the new positive meets "
        "I_new, the old positive breaks it, and I_new stays on the query's topic (rows it does not confirm are "
        "rejected as unverified; roughly doubles the cost of accepted rows; cached like the first pass). The guards' "
        "verdicts are stored in every record whatever the policy, so a 'none' run still reports what each would "
        "have rejected; changing the policy re-judges the cached answers without a call.",
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
        "it publishes eight and its progress moves). A killed run asks again for its calls in flight and the "
        "answers not yet in a shard: smaller shards lose less, and make more files."
    )
    ray_address: str | None = Field(None, description="Ray cluster address; None starts a local Ray.")
    ray_job: RayJobConfig | None = Field(
        None, description="Submit the run as a Ray Job to this cluster instead of driving it from this process; "
        "the job's driver joins the cluster it runs in (leave ray_address unset). Prefect flows only; the CLI "
        "is always its own driver.",
    )
    model_cache_dir: str = Field(".cache/models", description="Where packaged models are converted and cached.")

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> SynthesisConfig:
        if self.engine == "vllm" and self.sampling.max_tokens >= self.vllm.max_model_len:
            raise ValueError(f"sampling.max_tokens={self.sampling.max_tokens} leaves no room for a prompt in "
                             f"vllm.max_model_len={self.vllm.max_model_len}: lower the one or raise the other")
        return self

    @model_validator(mode="after")
    def _reasoning_first(self) -> SynthesisConfig:
        if self.prompt == "paper" and self.sampling.prefill:
            raise ValueError(f"the paper's prompt asks for reasoning before the answer, and a prefill "
                             f"({self.sampling.prefill!r}) makes the reply start with the answer: set sampling.prefill to ''")
        return self

    @model_validator(mode="after")
    def _one_driver(self) -> SynthesisConfig:
        if self.ray_job is not None and self.ray_address is not None:
            raise ValueError("ray_job runs the driver inside the cluster, which it joins by itself: leave ray_address "
                             f"unset (got {self.ray_address!r})")
        return self

    def model_id(self) -> str:
        return {"vllm": self.vllm.model, "openai": self.openai.model, "plugin": self.plugin.model_id}[self.engine]

    @property
    def verify(self) -> bool:
        """Whether the run asks the verification pass (filtering 'verify')."""
        return self.filtering == "verify"
