"""The sweep's grid: which points a `SweepConfig` asks for, and the training config of each.

Pure: the `sweep` flow (flows/sweep.py) runs the points; this module only says what they are.

    >>> [p["name"] for p in points(SweepConfig(mixtures=("ins-dv", "ratio"), ratios=(0.0, 0.5), random_seeds=(0,)))]
    ['ins-dv-s0', 'ratio-r0-s0', 'ratio-r0.5-s0']
"""

from __future__ import annotations

from dualview_core.config import SweepConfig, TrainingConfig
from dualview_core.method.mixtures import DUAL_VIEW_MIXTURES


def points(config: SweepConfig) -> list[dict]:
    """The grid: every mixture × random seed, the ratio mixture also × every ratio."""
    out = []
    for mixture in config.mixtures:
        for ratio in config.ratios if mixture == "ratio" else (None,):
            for seed in config.random_seeds:
                name = f"{mixture}" + (f"-r{ratio:g}" if ratio is not None else "") + f"-s{seed}"
                out.append({"name": name, "mixture": mixture, "ratio": ratio, "seed": seed})
    return out


def point_training(training: TrainingConfig, point: dict) -> TrainingConfig:
    """The training config of one point: its mixture, ratio and seed (mixture and training alike).
    Corruption swaps dual-view instructions, so mixtures without dual views train on clean rows."""
    clean = {} if point["mixture"] in DUAL_VIEW_MIXTURES else {"corruption": 0.0}
    ratio = {"ratio": point["ratio"]} if point["ratio"] is not None else {}
    mixture = training.mixture.model_copy(update={"name": point["mixture"], "seed": point["seed"], **clean, **ratio})
    return training.model_copy(update={"mixture": mixture, "seed": point["seed"]})
