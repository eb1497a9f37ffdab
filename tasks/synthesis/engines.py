"""Synthesis engines: one small interface, two implementations and a plugin hook.

An engine turns staged rows `{cache_key, messages, query_id, query, target_doc_id}` (the rendered
prompt, and which seed and which instruction negative N* it is about) into result rows `{cache_key,
raw_response, prompt_tokens, completion_tokens, latency_s, attempts, error}` (`contracts.ENGINE_RESULT`,
the fields of `dualview_core.synthesis.records.EngineResult`). LLM engines read only the messages. Each engine
is built from its own sub-config and the sampling config (`make_engine`), never the whole
SynthesisConfig. A Ray Data engine is a
`transform` of a Dataset of staged rows (other columns ride along untouched); an engine that answers
in this process has `answers(rows)`. What happens around an engine (reading the staged input, judging
and publishing the answers) is tasks/synthesis/publishing.py's.

- `VLLMEngine`: Ray's `ray.data.llm` processor over vLLM replicas (tensor parallel on GPUs; the CPU
  build with a packaged model on laptops and CI).
- `OpenAIEngine`: any OpenAI-compatible chat endpoint (or several serving the same model), over
  `actors` Ray Data actors, each with bounded concurrency, per-request timeouts and retries with
  backoff (tasks/synthesis/openai_client.py).
- a plugin (`engine: plugin`): any callable named by `synthesis.plugin.factory` that builds an engine
  answering in this process (`answers(rows)`). The controlled benchmarks plug in their reference
  engine this way (tests/helpers/reference_engine.py), which writes known correct reversals; the
  project itself imports no test code.

A prefill (SamplingConfig.prefill) is sent as a final assistant message that the reply continues.
vLLM's processor always continues it, so its raw response is prefill + continuation. An endpoint is
asked to continue and to echo the prefill (vLLM's server does both); its raw response is its reply
as sent, so a server that answers from scratch instead is never credited with the prefill, and the
parser reads only what lies inside the answer tags either way.

Before the engine, `prompt_sizer` counts each row's prompt with the engine's own tokenizer and chat
template (tasks/synthesis/planning.py), so a row whose prompt + max_tokens exceeds the context is rejected
without a call: vLLM uses the model's tokenizer and `max_model_len`; an endpoint is checked only when
its config names a `context_length` and a `tokenizer` (otherwise the server's refusal is recorded as
prompt_too_long). For vLLM that pass already holds each prompt's text with the chat template applied,
so it stages the text (`prompt`, see `templated`) and the engine reads it as it is: no chat-template
stage in Ray's processor, each prompt templated once however many rows a run has. Rows an engine
still fails on come back as error rows; `result_row` gives each one every result column.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dualview_core.config.base import redact
from dualview_core.config import (OpenAIEngineConfig, PluginEngineConfig, SamplingConfig, SynthesisConfig,
                                  VLLMEngineConfig)
from dualview_core.contracts import ENGINE_RESULT
from dualview_core.method.prompting import with_prefill

if TYPE_CHECKING:
    import ray.data

HELPER_CPUS = 0.1
OPENAI_BATCHES_IN_FLIGHT = 4  # batches an openai actor works on at once; its gate keeps `concurrency` requests in flight
# An openai batch (a staged row group, one Ray Data block) is this many waves of `concurrency` requests.
# Every block costs Ray a read task, a stage call and the driver's scheduling, whatever its size: more
# waves a block spread that cost over more rows, so the pipeline's CPU per row nears a bare aiohttp
# loop's and its steady rate nears the server's limit (benchmarks/README.md, synthesis_overhead.py).
OPENAI_WAVES = 4
# Non-secret variables the engine's Ray workers need; secrets stay in the workers' own environment.
PASSTHROUGH_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "VLLM_CPU_KVCACHE_SPACE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK")


class InProcessEngine(Protocol):
    def answers(self, rows: Iterable[dict]) -> Iterator[list[dict]]:
        """Result rows for staged rows, a list at a time."""
        ...


class RayDataEngine:
    """An engine that is a Ray Data stage (`transform`); answers stream out of the pipeline."""

    def transform(self, ds: ray.data.Dataset, carry: Sequence[str] = ()) -> ray.data.Dataset:
        """The engine's stages; each output row keeps the input's `carry` columns as they were."""
        raise NotImplementedError


def start_wait(cfg: SynthesisConfig) -> tuple[str, str]:
    """What the first answers wait for, and a hint of how long, said before the wait: an engine
    loading its weights is silent for minutes."""
    if cfg.engine == "vllm":
        v = cfg.vllm
        where = ("on CPU; usually 1-2 min" if v.cpu else
                 f"{v.replicas} replica(s) x {v.tensor_parallel_size} GPU(s); large models take several minutes")
        return "starting the vLLM engine", f"{v.model}, {where}"
    if cfg.engine == "plugin":
        return "building the plugin engine", f"{cfg.plugin.factory} (model id {cfg.plugin.model_id})"
    o = cfg.openai
    return "starting the Ray Data client stage", f"{', '.join(o.endpoints())}, model {o.model}, {o.actors} actor(s)"


def result_row(row: dict) -> dict:
    """Every result column for one engine output row. Ray's processor returns a row that failed
    inference as it was (its postprocess is skipped), with the error in `__inference_error__`."""
    error = row.get("__inference_error__") or row.get("error") or None
    if row.get("raw_response") is None and error is None:
        error = "engine returned no answer for this row"
    out = {
        "cache_key": row["cache_key"],
        "raw_response": None if error else row["raw_response"],
        "prompt_tokens": None if error else row.get("prompt_tokens"),
        "completion_tokens": None if error else row.get("completion_tokens"),
        "latency_s": row.get("latency_s") if isinstance(row.get("latency_s"), (int, float)) and row["latency_s"] >= 0 else None,
        "attempts": row.get("attempts") or 1,
        "error": redact(str(error))[:500] if error else None,  # an engine's words may quote credentials
    }
    return {name: out[name] for name in ENGINE_RESULT.names}  # contracts.ENGINE_RESULT owns the columns


@dataclass(frozen=True)
class PromptSizer:
    """The engine's view of a prompt: `text(messages)` is what it decodes from (its chat template
    applied as Ray's chat-template stage applies it: a final assistant message is continued),
    `tokens(text)` its length in the engine's tokens, `context` the most tokens a call may hold."""

    text: Callable[[list[dict]], str]
    tokens: Callable[[str], int]
    context: int


def templated(cfg: SynthesisConfig) -> bool:
    """Whether a run's planning pass stages each prompt's templated text for the engine (`prompt`
    instead of `messages`): vLLM, when prompts are counted (the text is a by-product of counting)."""
    return cfg.engine == "vllm" and cfg.count_prompt_tokens


def prompt_sizer(cfg: SynthesisConfig, model_path: str | None) -> PromptSizer | None:
    """How the configured engine sees a prompt, or None when its tokenizer or context is unknown."""
    if cfg.engine == "plugin" or not cfg.count_prompt_tokens:
        return None  # no known tokenizer or context; or the engine's own refusal is what counts
    if cfg.engine == "vllm":
        tokenizer_source, context = model_path or cfg.vllm.model, cfg.vllm.max_model_len
    elif cfg.openai.context_length and cfg.openai.tokenizer:
        from tasks.synthesis.llm_models import resolve_llm

        tokenizer_source, context = resolve_llm(cfg.openai.tokenizer, cfg.model_cache_dir), cfg.openai.context_length
    else:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    sampling = cfg.sampling

    def text(messages: list[dict]) -> str:
        full = with_prefill(list(messages), sampling)
        generation = full[-1]["role"] == "user"
        return tokenizer.apply_chat_template(full, tokenize=False, add_generation_prompt=generation,
                                             continue_final_message=not generation)

    return PromptSizer(text, lambda prompt: len(tokenizer(prompt)["input_ids"]), context)


class VLLMEngine(RayDataEngine):
    """`prompted`: the rows carry their templated `prompt` (`templated`), else their `messages`,
    which Ray's chat-template stage renders."""

    def __init__(self, vllm: VLLMEngineConfig, sampling: SamplingConfig, model_path: str, prompted: bool = False):
        self.vllm, self.sampling, self.model_path, self.prompted = vllm, sampling, model_path, prompted

    def _processor_config(self):
        from ray.data.llm import vLLMEngineProcessorConfig

        v = self.vllm
        engine_kwargs = {"dtype": v.dtype, "enforce_eager": v.enforce_eager, "max_model_len": v.max_model_len,
                         "enable_prefix_caching": v.enable_prefix_caching, "tensor_parallel_size": v.tensor_parallel_size}
        if v.max_num_seqs is not None:
            engine_kwargs["max_num_seqs"] = v.max_num_seqs
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        extra: dict = {}
        if v.cpu:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(v.kv_cache_gib)
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"  # vLLM keeps a core idle for its front end by default
            # The engine asks Ray for one CPU and no GPU; the chat-template stage, where there is one
            # (rows not `prompted`: verification, counting off), a tenth of a CPU.
            # vLLM tokenizes and detokenizes itself: separate Ray stages for that pay off on GPU nodes,
            # but on a laptop each is one more process importing vLLM before the first answer.
            extra = {"placement_group_config": {"bundles": [{"CPU": 1}]},
                     "chat_template_stage": {"num_cpus": HELPER_CPUS}, "tokenize_stage": False, "detokenize_stage": False}
        else:
            engine_kwargs["gpu_memory_utilization"] = v.gpu_memory_utilization
            extra = {"accelerator_type": None}
        if self.prompted:  # the text is templated already: one stage (an actor pool) fewer
            extra["chat_template_stage"] = False
        return vLLMEngineProcessorConfig(
            model_source=self.model_path, engine_kwargs=engine_kwargs, batch_size=v.batch_size,
            concurrency=v.replicas, max_concurrent_batches=v.max_concurrent_batches,
            should_continue_on_error=True,  # one bad row must not sink the run; it is recorded and retried
            log_engine_metrics=False,  # needs ray[serve]; vLLM's own metrics remain available
            runtime_env={"env_vars": env}, **extra,
        )

    def transform(self, ds: ray.data.Dataset, carry: Sequence[str] = ()) -> ray.data.Dataset:
        from ray.data.llm import build_processor

        sampling = self.sampling
        params = sampling.engine_params()
        prefill = sampling.prefill
        small = {"num_cpus": HELPER_CPUS} if self.vllm.cpu else {}
        carry, prompted = list(carry), self.prompted

        def pre(row: dict) -> dict:  # the processor's stages keep the carried columns; a failed row keeps all
            ask = {"prompt": row["prompt"]} if prompted else {"messages": with_prefill(list(row["messages"]), sampling)}
            return {"cache_key": row["cache_key"], **ask, "sampling_params": params, **{k: row[k] for k in carry}}

        def post(row: dict) -> dict:
            error = row.get("__inference_error__") or None
            return {
                **{k: row[k] for k in carry},
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


class OpenAIEngine(RayDataEngine):
    def __init__(self, openai: OpenAIEngineConfig, sampling: SamplingConfig):
        self.openai, self.sampling = openai, sampling

    def transform(self, ds: ray.data.Dataset, carry: Sequence[str] = ()) -> ray.data.Dataset:
        from ray.data import ActorPoolStrategy

        from tasks.synthesis.openai_client import OpenAIStage

        o = self.openai
        return ds.map_batches(
            OpenAIStage,
            fn_constructor_kwargs={"cfg": o, "sampling": self.sampling, "carry": list(carry)},
            batch_size=o.concurrency * OPENAI_WAVES,  # several batches in flight (async stage), one gate
            batch_format="pyarrow",
            compute=ActorPoolStrategy(size=o.actors),  # each actor: its own session, `concurrency` in flight
            num_cpus=HELPER_CPUS,  # a fraction: whole-CPU actors deadlock Ray Data on 2 cores
            max_concurrency=OPENAI_BATCHES_IN_FLIGHT,
        )


def plugin_engine(plugin: PluginEngineConfig) -> InProcessEngine:
    """The engine `plugin.factory` ("package.module:callable") builds from `plugin.options`."""
    import importlib

    if not plugin.factory or ":" not in plugin.factory:
        raise ValueError(f"engine 'plugin' needs synthesis.plugin.factory as 'package.module:callable', got {plugin.factory!r}")
    module, _, name = plugin.factory.partition(":")
    return getattr(importlib.import_module(module), name)(**plugin.options)


def make_engine(cfg: SynthesisConfig, model_path: str | None = None, prompted: bool = False) -> RayDataEngine | InProcessEngine:
    """The engine `cfg.engine` names, built from its own sub-config and the sampling config only
    (`sampling` is the pass's: a verification pass hands in `verify_sampling` as `cfg.sampling`).
    `prompted`: the rows carry a templated `prompt` (vLLM only, see `templated`)."""
    if cfg.engine == "vllm":
        return VLLMEngine(cfg.vllm, cfg.sampling, model_path or cfg.vllm.model, prompted)
    if cfg.engine == "openai":
        return OpenAIEngine(cfg.openai, cfg.sampling)
    return plugin_engine(cfg.plugin)


def batch_rows(cfg: SynthesisConfig) -> int:
    """Rows per engine batch: a staged row group, one block of a Ray Data engine's input, one task."""
    if cfg.engine == "vllm":
        return cfg.vllm.batch_size
    if cfg.engine == "openai":
        return cfg.openai.concurrency * OPENAI_WAVES  # the stage's batch: a few waves of requests
    return min(cfg.plugin.batch_rows, cfg.shard_rows)  # in-process answers: a batch need not outgrow a shard
