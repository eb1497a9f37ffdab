"""Data in: seed sources (Parquet, JSONL, a saved HF dataset; local or s3://) read in chunks,
validated into SeedRows with a quarantine, eval sets in their published layouts, TREC files, and
the bundled sample. Nothing here knows about engines, training or metrics' meaning."""
