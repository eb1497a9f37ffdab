"""Staged engine input as a Ray Data source: one read task per row group, so the engine's input
streams into the pipeline as it is consumed (Ray Data's backpressure decides how far ahead) and
neither the driver nor the object store holds the whole input.

A staged file's row groups are one engine batch each (tasks/synthesis/staging.py writes them so); each read
task yields exactly one of them as one block, which is one engine task, so answers come back a batch
at a time. The files are on the output's storage (OUT/.work: s3://, or a folder every node sees), so
a read task runs on any node. Read tasks ask for no CPU: the CPU vLLM profile gives the engine what
there is, and a cluster's head (where a Ray Job's driver runs) has none to give
(infra/ray/raycluster.yaml). At most `READERS` run at once; unbounded, tasks that take no whole CPU
let Ray start a worker process per task. Rows whose locator the plan left out (`StagedRows.drop`:
duplicates' calls) are filtered in the read task.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

READERS = 2  # read tasks at once: a row group takes milliseconds, the engine far longer


class StagedSource(Datasource):
    def __init__(self, staged, columns: Sequence[str]):
        self.fs, self.columns, self.drop = staged.fs, list(columns), staged.drop
        self.groups = []  # (path, row group, rows), in staging order
        for path in staged.paths:
            with self.fs.open(path, "rb") as f:
                meta = pq.ParquetFile(f).metadata
            self.groups += [(path, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context=None) -> list[ReadTask]:
        # one task per row group whatever `parallelism` asks: a group is one engine batch
        return [ReadTask(_reader(self.fs, path, group, self.columns, self.drop),
                         BlockMetadata(num_rows=rows, size_bytes=None, exec_stats=None, input_files=(path,)))
                for path, group, rows in self.groups]


def _reader(fs, path: str, group: int, columns: list[str], drop: np.ndarray):
    def read():
        with fs.open(path, "rb") as f:
            parquet = pq.ParquetFile(f)
            wanted = columns + (["locator"] if len(drop) and "locator" in parquet.schema_arrow.names else [])
            table = parquet.read_row_group(group, columns=wanted)
        if "locator" in wanted:
            table = table.filter(pc.invert(pc.is_in(table["locator"], value_set=pa.array(drop)))).select(columns)
        yield table

    return read


def read_staged(staged, columns: Sequence[str]):
    """A Dataset of the staged rows (`columns`), a row group per block."""
    import ray

    source = StagedSource(staged, columns)
    # a block per row group: without `override_num_blocks`, Ray splits blocks to reach its default parallelism
    return ray.data.read_datasource(source, num_cpus=0, concurrency=READERS, override_num_blocks=max(1, len(source.groups)))
