"""Staged engine input as a Ray Data source: one read task per row group, so the engine's input
streams into the pipeline as it is consumed (Ray Data's backpressure decides how far ahead) and
neither the driver nor the object store holds the whole input (except over Ray Client, below).

A staged file's row groups are one engine batch each (tasks/staging.py writes them so); each read
task yields exactly one of them as one block, which is one engine task, so answers come back a batch
at a time. The files are on the driver's local disk, so the read tasks are pinned to the driver's
node. They ask for no CPU: the CPU vLLM profile gives the engine what there is, and a cluster's head
(where a Ray Job's driver runs) has none to give (infra/ray/raycluster.yaml). At most `READERS` run
at once; unbounded, tasks that take no whole CPU let Ray start a worker process per task.

A driver connected over Ray Client (`ray://`) is on no node of the cluster, so no task can read its
files: its input is put into the object store, a row group per object, all before the run starts.
That holds the whole input in the cluster's object store (spilled to disk when full); a Ray Job
(`SynthesisConfig.ray_job`) streams it.
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


def _read_group(path: str, group: int, columns: list[str]):
    return pq.ParquetFile(path).read_row_group(group, columns=columns)


def _reader(path: str, group: int, columns: list[str]):
    def read():
        yield _read_group(path, group, columns)

    return read


def read_staged(paths: Sequence[str], columns: Sequence[str]):
    """A Dataset of the staged rows (`columns`), a row group per block."""
    import ray
    import ray.util.client
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    source = StagedSource(paths, columns)
    if ray.util.client.ray.is_connected():
        return ray.data.from_arrow_refs([ray.put(_read_group(path, group, source.columns)) for path, group, _ in source.groups])
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.data.read_datasource(source, num_cpus=0, concurrency=READERS, ray_remote_args={"scheduling_strategy": here})
