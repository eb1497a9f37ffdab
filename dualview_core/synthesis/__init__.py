"""Synthesis, pure parts: a call's cache key and record, the plan of a run decided from one small row
per seed, the cache index, verification prompts and verdicts, the geometry filter, the run's report
and the Ray Job spec. The runner is `tasks.synthesis`."""
