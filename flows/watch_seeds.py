"""Flow: re-synthesize when the seed source changed since the last successful synthesis.

Scheduled every 15 minutes by prefect.yaml. With `on_change="run"` it runs `synthesize` itself (which,
being content-addressed, sends only new or changed rows to the LLM); with `on_change="emit"` it only
emits `dualview.seeds.changed`, and the `synthesize` deployment's trigger does the work.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow
from prefect.events import emit_event

from dualview_core import samples
from dualview_core.config import SeedSource, SynthesisConfig
from flows.synthesize import DEFAULT_OUT, synthesize
from tasks.stages import SEEDS_CHANGED_EVENT, fingerprint_seeds, last_fingerprint


@flow(name="watch-seeds", log_prints=True)
def watch_seeds(
    seeds: SeedSource = SeedSource(path=samples.seeds_path()),
    out: str = DEFAULT_OUT,
    config: SynthesisConfig = SynthesisConfig(),
    on_change: Literal["run", "emit"] = "run",
) -> dict:
    current = fingerprint_seeds(seeds)
    previous = last_fingerprint(out, dict(seeds.storage_options))
    if current == previous:
        print(f"seeds unchanged since the last synthesis ({current}); nothing to do")
        return {"changed": False, "fingerprint": current}
    print(f"seeds changed ({previous} -> {current})")
    if on_change == "emit":
        emit_event(SEEDS_CHANGED_EVENT, resource={"prefect.resource.id": f"dualview.seeds.{current}"},
                   payload={"seeds": seeds.model_dump(mode="json"), "out": out, "fingerprint": current})
        return {"changed": True, "fingerprint": current, "emitted": SEEDS_CHANGED_EVENT}
    summary = synthesize(seeds=seeds, out=out, config=config)  # records the new fingerprint in its manifest
    return {"changed": True, "fingerprint": current, "synthesis": summary}
