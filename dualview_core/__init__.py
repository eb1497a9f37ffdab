"""dualview_core: the dual-view method and the pure parts of every stage.

    method/      the paper: prompt rendering and reply parsing, guards, dual views, training rows,
                 negatives, mixtures, the loss, p-MRR and Score. Imports only contracts, keys, config.
    data/        seed and eval-set sources, validation with quarantine, TREC files, the bundled sample
    synthesis/   cache keys and records, the plan of a run, the cache index, verification verdicts
    training/    DeepSpeed config, memory estimate, resume rules, the on-disk mixture, the sweep grid
    evaluation/  benchmarks, retrieval, scoring with intervals, headline numbers
    storage/     contract tables on local disk or s3://, output layout
    config/      one typed model per stage, profiles, the cluster's config and sizing
    contracts    every Arrow schema that crosses a stage boundary
    keys         canonical JSON and content digests
    model        the bi-encoder as a SentenceTransformer

It never imports prefect, ray, mlflow, deepspeed or vllm; `lint-imports` (pyproject.toml) checks that
and the direction of every import between these packages.
"""
