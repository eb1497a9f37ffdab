"""Flow: the paper's experiment — Ins-orig, Ins-DV, All-orig and All-DV, each trained and evaluated.

Synthesis runs once; each mixture trains and is evaluated on the profile's suite (the cluster's:
`paper`, the six columns) in its own nested MLflow run under one parent; the flow ends with the
Table 1-shaped comparison, with intervals. `scale` multiplies the paper's sizes (480k instruct rows
for the Ins mixtures, 440k + 440k for the All ones): 1.0 is the paper's run, 0.01 the same
proportions on 1% of the rows; None trains all four at the one budget the data allows.
"""

from __future__ import annotations

from prefect import flow

from dualview_core.config.profiles import Profile, SweepOverrides, explicit
from dualview_core.training.sweep_grid import paper_grid
from flows.sweep import run_grid


@flow(name="paper-experiment", log_prints=True)
def paper_experiment(profile: Profile = "cpu", scale: float | None = None,
                     config: SweepOverrides = SweepOverrides()) -> dict:
    """`config.pipeline` and `random_seeds` as in the sweep flow; the grid is the paper's."""
    if scale is not None and scale <= 0:
        raise ValueError(f"scale must be positive (got {scale})")
    grid = SweepOverrides.model_validate({**explicit(config), **paper_grid(scale)})
    return run_grid(profile, grid)
