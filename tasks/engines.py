"""Synthesis engines: one small interface, two implementations, both stages of a Ray Data pipeline.

An engine turns rows `{cache_key, messages}` into rows `{cache_key, raw_response, prompt_tokens,
completion_tokens, latency_s, attempts, error}` (the columns of `dualview_core.synthesis.EngineResult`).

- `VLLMEngine`: Ray's `ray.data.llm` processor over vLLM replicas (tensor parallel on GPUs; the CPU
  build with a packaged model on laptops and CI).
- `OpenAIEngine`: any OpenAI-compatible chat endpoint, with bounded concurrency, per-request timeouts
  and retries with backoff (tasks/openai_client.py).

A prefill (SamplingConfig.prefill) is sent as a final assistant message that the reply continues.
vLLM's processor always continues it, so its raw response is prefill + continuation. An endpoint is
asked to continue and to echo the prefill (vLLM's server does both); its raw response is its reply
as sent, so a server that answers from scratch instead is never credited with the prefill, and the
parser reads only what lies inside the answer tags either way.

Before the engine, `prompt_counter` counts each row's prompt with the engine's own tokenizer and chat
template, so a row whose prompt + max_tokens exceeds the context is rejected without a call: vLLM uses
the model's tokenizer and `max_model_len`; an endpoint is checked only when its config names a
`context_length` and a `tokenizer` (otherwise the server's refusal is recorded as prompt_too_long).
Rows an engine still fails on come back as error rows; `result_row` gives each one every result column.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from dualview_core.config import SamplingConfig, SynthesisConfig

if TYPE_CHECKING:
    import ray.data

RESULT_COLUMNS = ("cache_key", "raw_response", "prompt_tokens", "completion_tokens", "latency_s", "attempts", "error")
HELPER_CPUS = 0.1
OPENAI_BATCHES_IN_FLIGHT = 4  # every non-engine stage on the CPU profile: on 2 cores, whole CPUs deadlock
# Non-secret variables the engine's Ray workers need; secrets stay in the workers' own environment.
PASSTHROUGH_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "VLLM_CPU_KVCACHE_SPACE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK")


class Engine(Protocol):
    model_id: str

    def transform(self, ds: ray.data.Dataset) -> ray.data.Dataset: ...


def with_prefill(messages: list[dict], sampling: SamplingConfig) -> list[dict]:
    return messages + [{"role": "assistant", "content": sampling.prefill}] if sampling.prefill else messages


def start_wait(cfg: SynthesisConfig) -> tuple[str, str]:
    """What the first answers wait for, and a hint of how long, said before the wait: an engine
    loading its weights is silent for minutes."""
    if cfg.engine == "vllm":
        v = cfg.vllm
        where = ("on CPU; usually 1-2 min" if v.cpu else
                 f"{v.replicas} replica(s) x {v.tensor_parallel_size} GPU(s); large models take several minutes")
        return "starting the vLLM engine", f"{v.model}, {where}"
    return "starting the Ray Data client stage", f"{cfg.openai.base_url}, model {cfg.openai.model}"


def result_row(row: dict) -> dict:
    """Every result column for one engine output row. Ray's processor returns a row that failed
    inference as it was (its postprocess is skipped), with the error in `__inference_error__`."""
    error = row.get("__inference_error__") or row.get("error") or None
    if row.get("raw_response") is None and error is None:
        error = "engine returned no answer for this row"
    return {
        "cache_key": row["cache_key"],
        "raw_response": None if error else row["raw_response"],
        "prompt_tokens": None if error else row.get("prompt_tokens"),
        "completion_tokens": None if error else row.get("completion_tokens"),
        "latency_s": row.get("latency_s") if isinstance(row.get("latency_s"), (int, float)) and row["latency_s"] >= 0 else None,
        "attempts": row.get("attempts") or 1,
        "error": str(error)[:500] if error else None,
    }


PromptCounter = Callable[[list[dict]], int]


def prompt_counter(cfg: SynthesisConfig, model_path: str | None) -> tuple[PromptCounter, int] | None:
    """(messages -> prompt tokens, context length) for the configured engine, or None when unknown."""
    if cfg.engine == "vllm":
        tokenizer_source, context = model_path or cfg.vllm.model, cfg.vllm.max_model_len
    elif cfg.openai.context_length and cfg.openai.tokenizer:
        from tasks.llm_models import resolve_llm

        tokenizer_source, context = resolve_llm(cfg.openai.tokenizer, cfg.model_cache_dir), cfg.openai.context_length
    else:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    sampling = cfg.sampling

    def count(messages: list[dict]) -> int:
        # as Ray's chat-template and tokenize stages do it: continue a final assistant message
        full = with_prefill(list(messages), sampling)
        generation = full[-1]["role"] == "user"
        prompt = tokenizer.apply_chat_template(full, tokenize=False, add_generation_prompt=generation,
                                               continue_final_message=not generation)
        return len(tokenizer(prompt)["input_ids"])

    return count, context


class VLLMEngine:
    def __init__(self, cfg: SynthesisConfig, model_path: str):
        self.cfg, self.model_path = cfg, model_path
        self.model_id = cfg.vllm.model

    def _processor_config(self):
        from ray.data.llm import vLLMEngineProcessorConfig

        v = self.cfg.vllm
        engine_kwargs = {"dtype": v.dtype, "enforce_eager": v.enforce_eager, "max_model_len": v.max_model_len,
                         "enable_prefix_caching": v.enable_prefix_caching, "tensor_parallel_size": v.tensor_parallel_size}
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        extra: dict = {}
        if v.cpu:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(v.kv_cache_gib)
            small = {"num_cpus": HELPER_CPUS}
            # the engine asks Ray for one CPU and no GPU; helper stages take a tenth of a CPU each
            extra = {"placement_group_config": {"bundles": [{"CPU": 1}]}, "chat_template_stage": small,
                     "tokenize_stage": small, "detokenize_stage": small}
        else:
            engine_kwargs["gpu_memory_utilization"] = v.gpu_memory_utilization
            extra = {"accelerator_type": None}
        return vLLMEngineProcessorConfig(
            model_source=self.model_path, engine_kwargs=engine_kwargs, batch_size=v.batch_size,
            concurrency=v.replicas, max_concurrent_batches=v.max_concurrent_batches,
            should_continue_on_error=True,  # one bad row must not sink the run; it is recorded and retried
            log_engine_metrics=False,  # needs ray[serve]; vLLM's own metrics remain available
            runtime_env={"env_vars": env}, **extra,
        )

    def transform(self, ds: ray.data.Dataset) -> ray.data.Dataset:
        from ray.data.llm import build_processor

        sampling = self.cfg.sampling
        params = sampling.engine_params()
        prefill = sampling.prefill
        small = {"num_cpus": HELPER_CPUS} if self.cfg.vllm.cpu else {}

        def pre(row: dict) -> dict:
            return {"cache_key": row["cache_key"], "messages": with_prefill(list(row["messages"]), sampling),
                    "sampling_params": params}

        def post(row: dict) -> dict:
            error = row.get("__inference_error__") or None
            return {
                "cache_key": row["cache_key"],
                "raw_response": None if error else prefill + (row.get("generated_text") or ""),
                "prompt_tokens": row.get("num_input_tokens"),
                "completion_tokens": row.get("num_generated_tokens"),
                "latency_s": row.get("time_taken_llm"),
                "attempts": 1,
                "error": str(error)[:500] if error else None,
            }

        processor = build_processor(self._processor_config(), preprocess=pre, postprocess=post,
                                    preprocess_map_kwargs=small, postprocess_map_kwargs=small)
        return processor(ds)


class OpenAIEngine:
    def __init__(self, cfg: SynthesisConfig):
        self.cfg = cfg
        self.model_id = cfg.openai.model

    def transform(self, ds: ray.data.Dataset) -> ray.data.Dataset:
        from tasks.openai_client import OpenAIStage

        o = self.cfg.openai
        return ds.map_batches(
            OpenAIStage,
            fn_constructor_kwargs={"cfg": o, "sampling": self.cfg.sampling},
            batch_size=o.concurrency,  # one wave per batch; several batches in flight (async stage)
            batch_format="pyarrow",
            concurrency=1,
            num_cpus=HELPER_CPUS,
            max_concurrency=OPENAI_BATCHES_IN_FLIGHT,
        )


def make_engine(cfg: SynthesisConfig, model_path: str | None = None) -> Engine:
    if cfg.engine == "vllm":
        return VLLMEngine(cfg, model_path or cfg.vllm.model)
    return OpenAIEngine(cfg)


def answer_batches(cfg: SynthesisConfig, model_path: str | None, rows: list[dict]):
    """Send rows `{cache_key, messages}` through the configured engine in a Ray Data pipeline; yield
    lists of complete result rows (`result_row`), `cfg.shard_rows` at a time, as answers arrive."""
    import ray

    ds = make_engine(cfg, model_path).transform(ray.data.from_items(rows))
    for batch in ds.iter_batches(batch_size=cfg.shard_rows, batch_format="pyarrow"):
        yield [result_row(r) for r in batch.to_pylist()]
