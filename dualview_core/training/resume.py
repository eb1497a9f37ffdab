"""Resuming a training run: what identifies a run, where its state lives, where its data left off.

Owns the rules, not the files: a run is identified by a fingerprint of everything that shapes its
trajectory (the training config, the mixture's content digest, the number of ranks), so a state
saved by one run is never loaded into another; its resumable state lives next to its output at
`<out>.state`; and because the order of micro-batches is a pure function of (epoch, seed, rank), the
position after `s` optimizer steps is arithmetic, not a replay. It must not know how DeepSpeed
writes its state or how files reach s3:// (`tasks.training.state`).

    state folder:  <out>.state/progress.json        {"step": 4, "tag": "step-00000004", ...}
                   <out>.state/step-00000004/...    the engine's state at that step

`progress.json` is written last, after every rank finished its part of a save, so whatever it names
is complete; a crash mid-save leaves the previous step's state as the one to resume from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from dualview_core.config import TrainingConfig
from dualview_core.keys import canonical_json, digest

PROGRESS = "progress.json"
# Fields that may change between a crash and its resume without changing what is being trained.
RESUME_FREE = frozenset({"save_every", "eval_every"})


class StateMismatch(ValueError):
    """A saved state belongs to another run (config, data or ranks changed); it is not loaded."""


@dataclass(frozen=True)
class Progress:
    step: int  # optimizer steps completed and saved
    tag: str  # the engine-state folder inside the state folder
    fingerprint: str
    world_size: int
    data_digest: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Progress:
        return cls(**json.loads(text))


def state_location(out: str) -> str:
    """Where the run that publishes `out` keeps its resumable state (local or any fsspec URL)."""
    return f"{out.rstrip('/')}.state"


def tag_for(step: int) -> str:
    """The folder of the state saved after `step`; zero-padded, so names sort in step order.

        >>> tag_for(40)
        'step-00000040'
    """
    return f"step-{step:08d}"


def run_fingerprint(cfg: TrainingConfig, data_digest: str, world_size: int) -> str:
    """What a resumed run must share with the run that saved the state."""
    shaping = cfg.model_dump(mode="json", exclude=set(RESUME_FREE))
    return digest(canonical_json([shaping, data_digest, world_size]))


def check_resumable(progress: Progress, fingerprint: str, world_size: int, location: str) -> None:
    """Raise StateMismatch, naming what differs, unless `progress` was saved by this very run."""
    if progress.world_size != world_size:
        raise StateMismatch(f"{location} was saved by {progress.world_size} rank(s), this run has {world_size}; "
                            "resume with the same number of processes, or remove the folder to start over")
    if progress.fingerprint != fingerprint:
        raise StateMismatch(f"{location} holds step {progress.step} of a run with another training config or "
                            "other data; remove the folder to start over, or restore that config")


def resume_position(done: int, per_epoch: int) -> tuple[int, int]:
    """(epoch, index within the epoch) of the next micro-batch, after `done` of them, when each
    epoch holds `per_epoch` micro-batches per rank.

        >>> resume_position(7, per_epoch=3)
        (2, 1)
    """
    if per_epoch <= 0:
        raise ValueError("an epoch must hold at least one micro-batch")
    return divmod(done, per_epoch)
