"""Flow: polarity-reversal synthesis of the seed source into an output folder (content-addressed)."""

from __future__ import annotations

from prefect import flow

from dualview_core.config.profiles import DataSourceOverrides, Profile, SynthesisOverrides, for_synthesis
from tasks.artifacts import synthesize_artifacts
from tasks.stages import artifact_scope, publish_artifacts, synthesize_seeds


@flow(name="synthesize", log_prints=True)
def synthesize(
    profile: Profile = "cpu",
    seeds: DataSourceOverrides = DataSourceOverrides(),
    out: str | None = None,
    config: SynthesisOverrides = SynthesisOverrides(),
) -> dict:
    """Write complementary instructions for every eligible seed not already answered in `out`.
    `profile` (profiles/<name>.yaml) supplies every field left empty; `out` defaults to its workdir's
    synthesis/."""
    seeds, out, config = for_synthesis(profile, seeds, out, config)
    summary = synthesize_seeds(seeds, out, config)
    publish_artifacts(synthesize_artifacts(artifact_scope(), summary))
    return summary
