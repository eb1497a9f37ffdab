"""Flow: polarity-reversal synthesis of the seed source into an output folder (content-addressed)."""

from __future__ import annotations

from prefect import flow

from dualview_core import samples
from dualview_core.config import SeedSource, SynthesisConfig
from tasks.stages import synthesize_seeds

DEFAULT_OUT = ".cache/runs/synthesis"


@flow(name="synthesize", log_prints=True)
def synthesize(
    seeds: SeedSource = SeedSource(path=samples.seeds_path()),
    out: str = DEFAULT_OUT,
    config: SynthesisConfig = SynthesisConfig(),
) -> dict:
    """Write complementary instructions for every eligible seed not already answered in `out`."""
    return synthesize_seeds(seeds, out, config)
