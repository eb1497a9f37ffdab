"""Mixtures on disk: the same rows, order, composition and digest as in memory; ranks read only their rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dualview_core.config import MixtureConfig
from dualview_core.contracts import DUAL_VIEW_ROW, SEED_ROW
from dualview_core.training.mixture_store import _Mapped, build_store, open_store
from dualview_core.method.mixtures import build_mixture
from dualview_core.method.negatives import available, block_width, make_batch
from dualview_core.method.training_rows import rank_batches
from tests.helpers.factories import make_seeds, make_views


@pytest.fixture(scope="module")
def data() -> tuple[list[dict], list[dict]]:
    seeds = make_seeds(10)
    return seeds, make_views(seeds)


def batches(rows: list[dict], schema: pa.Schema, size: int) -> list[pa.Table]:
    return [pa.Table.from_pylist(rows[i:i + size], schema=schema) for i in range(0, len(rows), size)]


@pytest.mark.parametrize("kw", [
    {"name": "ins-orig"}, {"name": "ins-dv"}, {"name": "all-orig"}, {"name": "all-dv", "size": 6},
    {"name": "ratio", "ratio": 0.25, "total": 8}, {"name": "all-dv", "size": 6, "corruption": 0.5},
    {"name": "ins-dv", "heldout_fraction": 0.3, "seed": 7},
])
def test_stored_mixture_equals_the_one_built_in_memory(data, tmp_path, kw):
    seeds, views = data
    cfg = MixtureConfig(**{"heldout_fraction": 0.0, **kw})
    memory = build_mixture(seeds, views, cfg)
    # batches of 3 and 4: stored rows cross record-batch boundaries
    build_store(batches(seeds, SEED_ROW, 3), batches(views, DUAL_VIEW_ROW, 4), cfg, tmp_path / "m")
    disk = open_store(tmp_path / "m")
    assert (disk.name, disk.digest, disk.composition) == (memory.name, memory.digest, memory.composition)
    assert list(disk.rows) == list(memory.rows)  # same rows, same order, pairs adjacent
    assert tuple(disk.heldout) == memory.heldout and disk.heldout[:1] == list(memory.heldout[:1])
    assert disk.rows.available_negatives() == [available(r) for r in memory.rows]
    assert block_width(disk.rows, 30, strict=False) == block_width(memory.rows, 30, strict=False)
    if cfg.corruption:
        assert disk.composition["corrupted"] == 3 and sum(r.corrupted for r in disk.rows) == 3


def test_a_store_without_dual_views_and_a_missing_store(data, tmp_path):
    seeds, _ = data
    cfg = MixtureConfig(name="all-orig", heldout_fraction=0.0)
    build_store(batches(seeds, SEED_ROW, 5), [], cfg, tmp_path / "m")
    assert list(open_store(tmp_path / "m").rows) == list(build_mixture(seeds, None, cfg).rows)
    with pytest.raises(FileNotFoundError, match="holds no built mixture"):
        open_store(tmp_path / "nothing")


def test_a_rank_reads_only_the_rows_of_its_batches(data, tmp_path, monkeypatch):
    from dualview_core.config import TrainingConfig
    from tasks.training.trainer import _micro_batches

    seeds, _ = data
    cfg = TrainingConfig(mixture=MixtureConfig(name="all-orig", heldout_fraction=0.0), batch_size=2, negatives=2)
    build_store(batches(seeds, SEED_ROW, 4), [], cfg.mixture, tmp_path / "m")
    disk = open_store(tmp_path / "m")
    read: list[int] = []
    original = _Mapped.rows
    monkeypatch.setattr(_Mapped, "rows", lambda self, idx: read.extend(idx) or original(self, idx))
    stream = _micro_batches(disk, cfg, 2, rank=1, world=2)
    first, second = next(stream), next(stream)
    mine = rank_batches(len(disk.rows), 2, epoch=0, seed=cfg.seed, rank=1, world_size=2)[:2]
    assert sorted(read) == sorted(int(disk.rows.at[i]) for b in mine for i in b)  # 4 of the 20 rows, no more
    assert len(read) == 4 and len(disk.rows) == 20
    for got, rows in zip((first, second), mine):
        assert got == make_batch(disk.rows.take(rows), 2, epoch=0, seed=cfg.seed, template=cfg.query_template)
