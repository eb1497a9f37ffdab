"""The sweep's grid: which points a `SweepConfig` asks for, and the training config of each.

Pure: the `sweep` flow (flows/sweep.py) runs the points; this module only says what they are.

    >>> [p["name"] for p in points(SweepConfig(mixtures=("ins-dv", "ratio"), ratios=(0.0, 0.5), random_seeds=(0,)))]
    ['ins-dv-s0', 'ratio-r0-s0', 'ratio-r0.5-s0']
"""

from __future__ import annotations

from dualview_core.config import SweepConfig, TrainingConfig
from dualview_core.method.mixtures import DUAL_VIEW_MIXTURES


# The paper's experiment: the four configurations at its sizes (N, the instruct-row budget). Ins-DV's
# 480k are 240k seeds with both views; All-orig and All-DV add 440k non-instruct twins or dual views.
PAPER_MIXTURES = ("ins-orig", "ins-dv", "all-orig", "all-dv")
PAPER_SIZES = {"ins-orig": 480_000, "ins-dv": 480_000, "all-orig": 440_000, "all-dv": 440_000}


def paper_grid(scale: float | None) -> dict:
    """The SweepConfig fields of the paper's 2×2: its four mixtures, at its sizes times `scale`, or with
    `scale` None at the one budget every mixture reaches on the data (proportions not kept).

        >>> points(SweepConfig(**paper_grid(0.0001)))[1]["size"], points(SweepConfig(**paper_grid(None)))[1]["size"]
        (48, None)
    """
    grid: dict = {"mixtures": PAPER_MIXTURES, "ratios": (), "sizes": {}}
    return grid | ({"sizes": PAPER_SIZES, "scale": scale} if scale is not None else {})


def scaled_size(config: SweepConfig, mixture: str) -> int | None:
    """N of `mixture` in this grid: its size in `sizes` times `scale` (ins-dv even), else None."""
    if mixture not in config.sizes:
        return None
    n = max(1, round(config.sizes[mixture] * config.scale))
    return max(2, n - n % 2) if mixture == "ins-dv" else n


def points(config: SweepConfig) -> list[dict]:
    """The grid: every mixture × random seed, the ratio mixture also × every ratio."""
    out = []
    for mixture in config.mixtures:
        for ratio in config.ratios if mixture == "ratio" else (None,):
            for seed in config.random_seeds:
                name = f"{mixture}" + (f"-r{ratio:g}" if ratio is not None else "") + f"-s{seed}"
                out.append({"name": name, "mixture": mixture, "ratio": ratio, "seed": seed,
                            "size": scaled_size(config, mixture), "total": config.total if mixture == "ratio" else None})
    return out


def point_training(training: TrainingConfig, point: dict) -> TrainingConfig:
    """The training config of one point: its mixture, ratio, size and seed (mixture and training alike).
    Corruption swaps dual-view instructions, so mixtures without dual views train on clean rows."""
    clean = {} if point["mixture"] in DUAL_VIEW_MIXTURES else {"corruption": 0.0}
    given = {k: point[k] for k in ("ratio", "size", "total") if point.get(k) is not None}
    mixture = training.mixture.model_copy(update={"name": point["mixture"], "seed": point["seed"], **clean, **given})
    return training.model_copy(update={"mixture": mixture, "seed": point["seed"]})
