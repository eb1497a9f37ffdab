"""The reference engine: for controlled benchmarks only, plugged in as `engine: plugin`.

It answers every staged row from a world's metadata (tests/helpers/world.py) with the known correct
reversal for N*, in the answer block the parser reads, so guards, caching, dual views, mixtures,
training and evaluation run unchanged. It calls no model and needs no Ray. A row the world does not
describe gets an engine error, never an invented answer. Real seeds have no world: it must never stand
in for an LLM, which is why it lives with the tests and reaches the pipeline only through the plugin
hook (`reference_config`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dualview_core.config import PluginEngineConfig, SynthesisConfig
from tasks.synthesis.engines import result_row
from tests.helpers.world import read_metadata, reference_answer

FACTORY = f"{__name__}:ReferenceEngine"
MODEL_ID = "reference"


def reference_config(world: str, **synthesis) -> SynthesisConfig:
    """A SynthesisConfig whose engine is the reference engine over `world` (the world.json path)."""
    return SynthesisConfig(engine="plugin", plugin=PluginEngineConfig(factory=FACTORY, options={"world": world},
                                                                      model_id=MODEL_ID), **synthesis)


class ReferenceEngine:
    def __init__(self, world: str | None = None):
        if not world:
            raise ValueError("the reference engine needs options.world (the world.json of the seeds)")
        self.world = read_metadata(world)

    def answers(self, rows: Iterable[dict]) -> Iterator[list[dict]]:
        out = []
        for row in rows:
            try:
                raw, error = reference_answer(self.world, row["query_id"], row["target_doc_id"], row["query"]), None
            except KeyError as e:  # a seed or passage the world does not describe
                raw, error = None, f"reference engine: the world has no {e.args[0]}"
            out.append(result_row({"cache_key": row["cache_key"], "raw_response": raw, "prompt_tokens": 0,
                                   "completion_tokens": 0, "latency_s": 0.0, "error": error}))
        yield out


class EchoEngine:
    """A model that repeats its input: the user message (the seed's fields) as its reply, after `prefix`
    (a prefill such a model would continue). For the guarantee that seed text never becomes an answer."""

    def __init__(self, prefix: str = ""):
        self.prefix = prefix

    def answers(self, rows: Iterable[dict]) -> Iterator[list[dict]]:
        yield [result_row({"cache_key": row["cache_key"], "raw_response": self.prefix + row["messages"][-1]["content"],
                           "prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0, "error": None}) for row in rows]


class MixedEngine(ReferenceEngine):
    """The reference engine with every outcome a report counts, decided by the cache key: a fifth of
    the rows fail (an engine error), a fifth get a reply without the answer block, a fifth get the
    reversal with a sentence a content guard flags, the rest the reversal; replies of varied lengths."""

    def answers(self, rows: Iterable[dict]) -> Iterator[list[dict]]:
        out = []
        for row in rows:
            kind = int(row["cache_key"][:8], 16) % 5
            try:
                raw, error = reference_answer(self.world, row["query_id"], row["target_doc_id"], row["query"]), None
            except KeyError as e:  # a seed the world does not describe
                raw, error, kind = None, f"mixed engine: the world has no {e.args[0]}", None
            if kind == 0:
                raw, error = None, "mixed engine: a failure"
            elif kind == 1:
                raw = "I cannot help with that."
            elif kind == 2:
                raw = raw.replace("<new_instruction>", "<new_instruction>Sure! Here is the new instruction: ")
            out.append(result_row({"cache_key": row["cache_key"], "raw_response": raw, "prompt_tokens": 0,
                                   "completion_tokens": int(row["cache_key"][8:12], 16) % 50, "latency_s": 0.0,
                                   "error": error}))
        yield out
