"""Seed loading end to end: stream a source through validation, keep the good rows, quarantine the rest.

The composition of `sources` (bytes -> rows), `seeds` (rows -> SeedRows or rejections) and `io`
(tables -> files). Memory stays bounded by one batch unless the caller asks for the whole table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from dualview_core.config import ValidationConfig
from dualview_core.contracts import QUARANTINE, SEED_ROW
from dualview_core.storage.tables import TableWriter, quarantine_table
from dualview_core.storage.layout import output_options
from dualview_core.data.seeds import SeedValidator, ValidationReport
from dualview_core.data.sources import iter_raw


@dataclass
class SeedLoad:
    seeds: pa.Table  # SEED_ROW, valid rows in source order
    quarantine: pa.Table  # QUARANTINE
    report: ValidationReport


def stream_seeds(path: str, storage_options: dict | None = None, cfg: ValidationConfig | None = None,
                 quarantine_path: str | None = None, quarantine_options: dict | None = None,
                 ) -> tuple[Iterator[pa.Table], SeedValidator]:
    """Valid SEED_ROW batches, lazily; rejected rows go to `quarantine_path` (Parquet) if given.

    The validator's `report` is complete once the iterator is exhausted. The quarantine file is
    written even when nothing was rejected, so its absence never has to be interpreted; it is written
    with `quarantine_options` (default: the source's options).
    """
    validator = SeedValidator(cfg)
    raw = iter_raw(path, storage_options, validator.cfg.batch_rows)

    def batches() -> Iterator[pa.Table]:
        options = output_options(quarantine_options, storage_options)
        writer = TableWriter(quarantine_path, QUARANTINE, options) if quarantine_path else None
        try:
            for valid, rejected in validator.batches(raw):
                if writer and rejected:
                    writer.write(quarantine_table(rejected, path))
                yield valid
        except BaseException:
            if writer:
                writer.abort()
            raise
        if writer:
            writer.close()

    return batches(), validator


def read_seeds(path: str, storage_options: dict | None = None, cfg: ValidationConfig | None = None) -> SeedLoad:
    """All valid rows and all rejections of a (small enough) source, in memory."""
    validator = SeedValidator(cfg)
    valid, rejected = [], []
    for good, bad in validator.batches(iter_raw(path, storage_options, validator.cfg.batch_rows)):
        valid.append(good)
        rejected.extend(bad)
    seeds = pa.concat_tables(valid) if valid else SEED_ROW.empty_table()
    return SeedLoad(seeds, quarantine_table(rejected, path), validator.report)
