"""Where data comes from and how strictly seed rows are checked: the seeds and eval-set forms."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dualview_core.config.base import ConfigModel


class ValidationConfig(ConfigModel):
    """How strict seed validation is. Rejected rows are quarantined, never dropped."""

    max_passage_chars: int = Field(
        20_000,
        gt=0,
        description="Passages longer than this are quarantined. Promptriever passages are MS MARCO "
        "sized (< 2k chars); a huge passage is usually a parsing accident and would be truncated "
        "to the encoder's max length anyway.",
    )
    max_query_chars: int = Field(
        4_000, gt=0, description="Queries (without instruction) longer than this are quarantined."
    )
    batch_rows: int = Field(
        2_048,
        gt=0,
        description="Rows per streamed batch; a batch is held as Python objects while it is checked, so "
        "a larger one raises a synthesis driver's peak memory without making the run faster "
        "(benchmarks/README.md, synthesis_scale.py).",
    )



class DataSource(ConfigModel):
    """Where a data set lives: seed rows (Promptriever format) or an eval set (FollowIR format)."""

    path: str = Field(
        description="Local path or s3:// URL of a Parquet file, a JSONL file, a folder of either, "
        "or a `datasets.save_to_disk` folder."
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec options for remote paths (e.g. endpoint_url). Credentials belong in "
        "the environment or a secret store, not here.",
    )
