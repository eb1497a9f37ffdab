"""Starting or joining Ray: a local instance by default, a cluster when an address is configured."""

from __future__ import annotations

import logging
import os

from tasks.synthesis.engines import PASSTHROUGH_ENV


def ensure_ray(address: str | None = None) -> None:
    """`ray.init` once per process. Local Ray inherits this process's environment."""
    import ray

    if ray.is_initialized():
        return
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    ray.init(address=address, include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=False,
             configure_logging=True, logging_level="WARNING")
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # our own progress lines say what matters
    ctx.print_on_execution_start = False
    # The memory-issue detector suggests per-actor `memory=` on every small run; it is advice, not a fault.
    ctx.issue_detectors_config.detectors = []
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    # one-time notices about choices made above, not faults: "progress bars disabled" (our lines
    # carry rows/s and an ETA into the Prefect log, which bars cannot), and vLLM's CPU build saying
    # its bundled Triton has no CPU backend
    for notice in ("ray.data._internal.progress", "vllm.triton_utils.importing"):
        logging.getLogger(notice).setLevel(logging.ERROR)
