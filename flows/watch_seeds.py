"""Flow: re-synthesize when the seed source changed since the last successful synthesis.

Scheduled every 15 minutes by prefect.yaml. With `on_change="run"` it runs `synthesize` itself (which,
being content-addressed, sends only new or changed rows to the LLM); with `on_change="emit"` it only
emits `dualview.seeds.changed` for `dualview.seeds.<profile>.<fingerprint>`, and the synthesize
deployment of that profile (prefect.yaml's triggers) does the work.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow
from prefect.events import emit_event

from dualview_core.config.profiles import Profile, DataSourceOverrides, SynthesisOverrides, for_synthesis
from flows.synthesize import synthesize
from tasks.stages import SEEDS_CHANGED_EVENT, fingerprint_seeds, last_fingerprint


@flow(name="watch-seeds", log_prints=True)
def watch_seeds(
    profile: Profile = "cpu",
    seeds: DataSourceOverrides = DataSourceOverrides(),
    out: str | None = None,
    config: SynthesisOverrides = SynthesisOverrides(),
    on_change: Literal["run", "emit"] = "run",
) -> dict:
    seeds, out, config = for_synthesis(profile, seeds, out, config)
    current = fingerprint_seeds(seeds)
    previous = last_fingerprint(out, dict(seeds.storage_options))
    if current == previous:
        print(f"seeds unchanged since the last synthesis ({current}); nothing to do")
        return {"changed": False, "fingerprint": current}
    print(f"seeds changed ({previous} -> {current})")
    if on_change == "emit":
        emit_event(SEEDS_CHANGED_EVENT, resource={"prefect.resource.id": f"dualview.seeds.{profile}.{current}"},
                   payload={"seeds": seeds.model_dump(mode="json"), "out": out, "fingerprint": current,
                            "profile": profile})
        return {"changed": True, "fingerprint": current, "emitted": SEEDS_CHANGED_EVENT}
    summary = synthesize(profile=profile, seeds=seeds, out=out, config=config)  # records the new fingerprint in its manifest
    return {"changed": True, "fingerprint": current, "synthesis": summary}
