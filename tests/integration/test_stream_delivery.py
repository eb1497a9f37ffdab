"""The driver follows a synthesis by the summaries of the shards the workers publish: each must reach
it when it is made, not when the next one is."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from tasks.synthesis.publishing import as_made
from tasks.synthesis.ray_runtime import ensure_ray

pytestmark = pytest.mark.integration
WAIT_S = 20


def test_a_block_reaches_the_driver_before_the_next_one_exists(tmp_path):
    """The second task makes its block only once the driver holds the first (or after WAIT_S): a
    driver handed each block only when the next exists would wait out the timeout."""
    import ray

    ensure_ray()
    seen = tmp_path / "first-block-seen"

    def make(batch: pa.Table) -> pa.Table:
        if batch["i"][0].as_py() == 0:
            return pa.table({"i": [0], "waited_s": [0.0]})
        start = time.monotonic()
        while not Path(seen).exists() and time.monotonic() - start < WAIT_S:
            time.sleep(0.05)
        return pa.table({"i": [1], "waited_s": [time.monotonic() - start]})

    ds = ray.data.from_items([{"i": 0}, {"i": 1}], override_num_blocks=2).map_batches(
        make, batch_size=None, batch_format="pyarrow", num_cpus=0.1)
    got = []
    for table in as_made(ds):
        got += table.to_pylist()
        seen.touch()
    assert [r["i"] for r in got] == [0, 1]
    assert got[1]["waited_s"] < WAIT_S / 2, got  # the second block was made once the first was in hand
