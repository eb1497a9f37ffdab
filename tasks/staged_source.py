"""Staged engine input as a Ray Data source: one read task per row group, so the engine's input
streams into the pipeline as it is consumed (Ray Data's backpressure decides how far ahead) and
neither the driver nor the object store ever holds the whole input.

A staged file's row groups are one engine batch each (tasks/staging.py writes them so); each read
task yields exactly one of them as one block, which is one engine task, so answers come back a batch
at a time. The files are on the driver's local disk, so the read tasks are pinned to the driver's
node; they take a tenth of a CPU, because the CPU vLLM profile gives the engine the rest, and at
most `READERS` run at once (a tenth of a CPU each would otherwise let Ray start ten worker processes
per CPU for them).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow.parquet as pq
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

READERS = 2  # read tasks at once: a row group takes milliseconds, the engine far longer


class StagedSource(Datasource):
    def __init__(self, paths: Sequence[str], columns: Sequence[str]):
        self.columns = list(columns)
        self.groups = []  # (path, row group, rows), in staging order
        for path in paths:
            meta = pq.ParquetFile(path).metadata
            self.groups += [(path, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context=None) -> list[ReadTask]:
        # one task per row group whatever `parallelism` asks: a group is one engine batch
        return [ReadTask(_reader(path, group, self.columns),
                         BlockMetadata(num_rows=rows, size_bytes=None, exec_stats=None, input_files=(path,)))
                for path, group, rows in self.groups]


def _reader(path: str, group: int, columns: list[str]):
    def read():
        yield pq.ParquetFile(path).read_row_group(group, columns=columns)

    return read


def read_staged(paths: Sequence[str], columns: Sequence[str], num_cpus: float):
    """A Dataset of the staged rows (`columns`), read on this process's node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.data.read_datasource(StagedSource(paths, columns), num_cpus=num_cpus, concurrency=READERS,
                                    ray_remote_args={"scheduling_strategy": here})
