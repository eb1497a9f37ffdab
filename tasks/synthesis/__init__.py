"""Synthesis runner: seeds -> plan -> engine -> judged records -> dual views, as Ray Data jobs.
`driver.run_synthesis` is the entry; the pure parts are `dualview_core.synthesis`."""
