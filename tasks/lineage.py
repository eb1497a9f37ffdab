"""Run lineage: the tags and params a flow's MLflow run gets, saying what actually ran.

Owns, per flow, which facts identify a run — the code (git commit), the models, the mixture, the
data (paths and digests) — so that a `train` run names the synthesis model found in the dual views
it trained on and an `evaluate` run names only the model it evaluated, never a default of a stage
that did not run. Params are the stage configs the flow ran, flattened and without secrets.
"""

from __future__ import annotations

from dualview_core.config import EvaluationConfig, PipelineConfig, SeedSource, SweepConfig, TrainingConfig
from tasks.tracking import flatten, git_commit

KIND, GIT_COMMIT = "dualview.run_kind", "dualview.git_commit"  # kind: pipeline, sweep, train, evaluate
SYNTHESIS_MODEL, PROMPT_VERSION = "dualview.synthesis_model", "dualview.prompt_version"
BASE_MODEL, MIXTURE, MODEL = "dualview.base_model", "dualview.mixture", "dualview.model"
SEEDS, DUAL_VIEWS, EVAL_SET = "dualview.seeds", "dualview.dual_views", "dualview.eval_set"

Lineage = tuple[dict[str, str], dict[str, str]]  # (tags, params)


def _tags(kind: str, **tags: object) -> dict[str, str]:
    return {KIND: kind, GIT_COMMIT: git_commit(), **{k: str(v) for k, v in tags.items() if v is not None}}


def pipeline_lineage(config: PipelineConfig) -> Lineage:
    tags = _tags("pipeline", **{SYNTHESIS_MODEL: config.synthesis.model_id(), BASE_MODEL: config.training.model,
                                MIXTURE: config.training.mixture.name, SEEDS: config.seeds.path,
                                EVAL_SET: config.eval_set.path})
    return tags, flatten(config)


def sweep_lineage(config: SweepConfig) -> Lineage:
    p = config.pipeline
    tags = _tags("sweep", **{SYNTHESIS_MODEL: p.synthesis.model_id(), BASE_MODEL: p.training.model,
                             MIXTURE: ",".join(config.mixtures), SEEDS: p.seeds.path, EVAL_SET: p.eval_set.path})
    return tags, flatten(config)


def train_lineage(config: TrainingConfig, seeds: SeedSource, dual_views: str, storage_options: dict) -> Lineage:
    """The synthesis model and prompt version are read from the dual views themselves."""
    made_by = dual_view_origin(dual_views, storage_options)
    tags = _tags("train", **{BASE_MODEL: config.model, MIXTURE: config.mixture.name, SEEDS: seeds.path,
                             DUAL_VIEWS: dual_views, **made_by})
    return tags, {**flatten(config, "training"), "seeds.path": seeds.path, "dual_views": dual_views}


def evaluate_lineage(model: str, eval_set: SeedSource, config: EvaluationConfig) -> Lineage:
    tags = _tags("evaluate", **{MODEL: model, EVAL_SET: eval_set.path})
    return tags, {**flatten(config, "evaluation"), "model": model, "eval_set.path": eval_set.path}


def dual_view_origin(path: str, storage_options: dict) -> dict[str, str]:
    """{synthesis_model, prompt_version} of a dual-views file, from its columns alone ('a,b' when it
    mixes several); {} when the file cannot be read (the training stage reports that itself)."""
    import pyarrow.parquet as pq

    from dualview_core.sources import filesystem

    try:
        fs, inner = filesystem(path, storage_options)
        with fs.open(inner, "rb") as f:
            table = pq.read_table(f, columns=["model_id", "prompt_version"])
    except (OSError, ValueError, KeyError):
        return {}
    values = {column: ",".join(sorted({v for v in table.column(column).to_pylist() if v}))
              for column in ("model_id", "prompt_version")}
    return {SYNTHESIS_MODEL: values["model_id"] or None, PROMPT_VERSION: values["prompt_version"] or None}
