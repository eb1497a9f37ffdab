"""Engine answers judged into records: parse, guards, the geometry filter, SynthesisRecord rows.

Every answer's guard verdict is computed and stored; the run's filtering policy decides whether it
rejects the row (`records.record`).

`RecordStage` is the Ray Data stage after the engine: the rows reach it with the columns a record
needs (INFO, and TARGET for the geometry filter) carried through the engine from the staged input,
so no answer travels back to the driver to be judged there; the driver only publishes the records
as shards. Rows that never reach an engine (prompt too long, or no row came back) and the reference
engine's answers (in this process) go through the same stage as a plain call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from dualview_core.config import GuardConfig, SynthesisConfig
from dualview_core.contracts import SYNTHESIS_RECORD
from dualview_core.method.parsing import Rejection, guard, parse
from dualview_core.synthesis.records import EngineResult, WorkItem, record

ENGINE_INPUT = ("cache_key", "messages", "query_id", "query", "target_doc_id")  # what an engine may read
INFO = ("cache_key", "seed_key", "target_index", "query_id", "query", "instruction")  # what a record needs
TARGET = ("target_title", "target_text")  # N*, for the geometry filter only


@dataclass(frozen=True)
class Judging:
    """How answers become records: what goes into a record besides the answer, and the rules."""

    version: str  # prompt version
    model_id: str
    sampling: dict
    guards: GuardConfig
    filtering: str  # config.synthesis.Filtering: whether a guard's verdict rejects the row
    geometry_encoder: str | None = None  # the geometry filter's frozen encoder; None: the filter is off

    @property
    def columns(self) -> list[str]:
        """The staged columns each answer needs next to it."""
        return list(INFO + TARGET) if self.geometry_encoder else list(INFO)


@dataclass(frozen=True)
class Prompted:
    """A prompt put to a model by a run: the config, the prompt and its version, and the model and
    sampling that go into every cache key with it."""

    cfg: SynthesisConfig
    template: str
    version: str
    model_id: str
    sampling: dict


@dataclass(frozen=True)
class Asking(Prompted):
    """How this run asks for reversed instructions."""

    @property
    def geometry(self) -> bool:
        return self.cfg.geometry_filter

    @property
    def judging(self) -> Judging:
        cfg = self.cfg
        return Judging(self.version, self.model_id, self.sampling, cfg.guards, cfg.filtering,
                       cfg.geometry_encoder if cfg.geometry_filter else None)

    @property
    def prompted(self) -> bool:
        """Whether the engine reads each row's templated `prompt` rather than its `messages`."""
        from tasks.synthesis.engines import templated

        return templated(self.cfg)

    @property
    def staged_columns(self) -> list[str]:
        """A staged row's columns: the engine's input, and what the record of its answer needs."""
        wanted = engine_input(self.prompted)
        return [*wanted, *(c for c in self.judging.columns if c not in wanted)]

    @property
    def batch_rows(self) -> int:
        from tasks.synthesis.engines import batch_rows

        return batch_rows(self.cfg)


def engine_input(prompted: bool) -> tuple[str, ...]:
    """What an engine reads of a staged row: ENGINE_INPUT, with the templated `prompt` in place of the
    `messages` when the planning pass rendered it (tasks.synthesis.engines.templated)."""
    return tuple("prompt" if c == "messages" and prompted else c for c in ENGINE_INPUT)


def engine_row(seed: Mapping, target_index: int, key: str, messages: list[dict], geometry: bool) -> dict:
    """A staged row for one call: the rendered `messages` (the planning pass may add their templated
    `prompt`, tasks.synthesis.engines.templated), which seed and which instruction negative
    N* it is about (what an engine may read besides the messages: LLM engines ignore it, the reference
    engine answers from it), and what the record of its answer needs (INFO, TARGET with `geometry`)."""
    target = seed["instruction_negatives"][target_index]
    row = {"cache_key": key, "messages": messages, "query_id": seed["query_id"], "query": seed["query"],
           "target_doc_id": target["doc_id"], "seed_key": seed["seed_key"], "target_index": target_index,
           "instruction": seed["instruction"]}
    return row | {"target_title": target["title"], "target_text": target["text"]} if geometry else row


class RecordStage:
    """Result rows that carry their info (`EngineResult` fields + `Judging.columns`) -> a
    SYNTHESIS_RECORD table, in the same order. A stage of `tasks.synthesis.engines.judged` (a Ray Data actor
    loads the geometry filter's encoder once, at first need), or called in this process."""

    def __init__(self, judging: Judging):
        self.judging, self._encoder = judging, None

    def __call__(self, rows: list[dict]) -> pa.Table:
        j = self.judging
        judged = []
        for row in rows:
            seed = {k: row[k] for k in ("seed_key", "query_id", "query", "instruction")}
            item = WorkItem(seed, row["target_index"], row["cache_key"])
            result = EngineResult(**{k: row[k] for k in EngineResult.__slots__ if k in row})
            parsed = parse(result.raw_response)
            verdict = guard(parsed.instruction, seed["instruction"], seed["query"], j.guards) if parsed.instruction else None
            judged.append((item, row, result, parsed, verdict))
        deltas = self._deltas([(row, parsed) for _, row, _, parsed, _ in judged]) if j.geometry_encoder else [None] * len(judged)
        out = []
        for (item, _, result, parsed, verdict), delta in zip(judged, deltas):
            rec = record(item, result, parsed, prompt_version=j.version, model_id=j.model_id, sampling=j.sampling,
                         geometry_delta=delta, guard=verdict, filtering=j.filtering)
            if delta is not None and delta <= 0 and rec["rejection"] is None:
                rec["rejection"] = Rejection.GEOMETRY.value
            out.append(rec)
        return pa.Table.from_pylist(out, schema=SYNTHESIS_RECORD)

    def _deltas(self, judged: list) -> list[float | None]:
        """The geometry filter's delta of each (row, parsed), None where there is no instruction."""
        from dualview_core.synthesis.geometry import geometry_deltas

        usable = [(i, row, parsed) for i, (row, parsed) in enumerate(judged) if parsed.instruction]
        out: list[float | None] = [None] * len(judged)
        if not usable:
            return out
        if self._encoder is None:
            from dualview_core.model import load_model

            self._encoder = load_model(self.judging.geometry_encoder)
        values = geometry_deltas(self._encoder, [row["query"] for _, row, _ in usable],
                                 [parsed.instruction for _, _, parsed in usable],
                                 [(row["target_title"], row["target_text"]) for _, row, _ in usable])
        for (i, _, _), value in zip(usable, values):
            out[i] = value
        return out
