"""Typed configuration: one pydantic model per stage, each field documenting its trade-off.

Flows take these models as parameters, so Prefect validates them and its UI renders them as forms.
Environment variables are read at the edges (tasks, CLI), never here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ValidationConfig(_Config):
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
        8_192,
        gt=0,
        description="Rows per streamed batch. Larger batches are a little faster and use more "
        "memory; peak memory stays bounded either way.",
    )


class SeedSource(_Config):
    """Where seed rows come from."""

    path: str = Field(
        description="Local path or s3:// URL of a Parquet file, a JSONL file, a folder of either, "
        "or a `datasets.save_to_disk` folder."
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="fsspec options for remote paths (e.g. endpoint_url). Credentials belong in "
        "the environment or a secret store, not here.",
    )


# --- synthesis ----------------------------------------------------------------------------------


# --- training -----------------------------------------------------------------------------------


# --- evaluation ---------------------------------------------------------------------------------
