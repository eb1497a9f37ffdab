"""The pipeline and the sweep: the stages' configs together, with what two stages must agree on.
The `pipeline` and `sweep` flows' forms."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from dualview_core.config.base import ConfigModel
from dualview_core.config.data import DataSource
from dualview_core.config.evaluation import EvaluationConfig
from dualview_core.config.synthesis import SynthesisConfig
from dualview_core.config.training import MixtureConfig, MixtureName, TrainingConfig
from dualview_core.storage.layout import Layout, output_options


def _bundled_seeds() -> DataSource:
    from dualview_core import sample

    return DataSource(path=sample.seeds_path())


def _bundled_eval_set() -> DataSource:
    from dualview_core import sample

    return DataSource(path=sample.followir_path())


def _demo_training() -> TrainingConfig:
    # Small enough for a demo on 2 CPU cores: short texts, small batches, and only the steps the
    # bundled sample needs for its loss to approach 0 (benchmarks/README.md has the step time). The
    # paper's values stay the defaults of TrainingConfig itself (τ, K, template). all-dv: the
    # instruct rows plus their dual views.
    return TrainingConfig(mixture=MixtureConfig(name="all-dv"), max_length=128, batch_size=8, max_steps=12,
                          learning_rate=5e-5, eval_every=6)


def registered_model_name(mixture: str, backbone: str) -> str:
    """The registry name a trained model gets by default: one version line per mixture and backbone,
    the backbone as its last path segment (a hub id's name, a folder's name), in the characters a
    `models:/` URI keeps intact.

        >>> registered_model_name("all-dv", "Alibaba-NLP/gte-multilingual-mlm-base")
        'dualview-all-dv-gte-multilingual-mlm-base'
        >>> registered_model_name("ins-dv", "/data/My Models/minilm-v2/")
        'dualview-ins-dv-minilm-v2'
    """
    short = re.sub(r"[^A-Za-z0-9._-]+", "-", backbone.rstrip("/").rsplit("/", 1)[-1]).strip("-.")
    return f"dualview-{mixture}-{short or 'model'}"


# What MLflow takes as an alias: letters, digits, _ and -, but not "latest" or a version ("v3"),
# which `models:/NAME@...` would read as something else.
_ALIAS = re.compile(r"^[\w-]+$")
_RESERVED_ALIAS = re.compile(r"^(latest|[vV]\d+)$", re.IGNORECASE)


class PipelineConfig(ConfigModel):
    """synthesize → mixture → train → evaluate (trained and base), tracked as one MLflow parent run."""

    name: str = Field("dualview", description="MLflow experiment: runs of one pipeline name compare side by side.")
    seeds: DataSource = Field(default_factory=_bundled_seeds, description="Seed rows (Promptriever format).")
    eval_set: DataSource = Field(default_factory=_bundled_eval_set, description="A FollowIR-style eval-set folder.")
    workdir: str = Field(
        ".cache/runs", description="Where outputs go (local or s3://): synthesis/ is shared across runs (it is "
        "content-addressed); models/ and eval/ get one folder per run."
    )
    workdir_storage_options: dict[str, Any] | None = Field(
        None, description="fsspec options for an s3:// workdir (e.g. endpoint_url); None: the seeds' options. "
        "Credentials come from the environment."
    )
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)
    training: TrainingConfig = Field(default_factory=_demo_training)
    evaluation: EvaluationConfig = Field(default_factory=lambda: EvaluationConfig(max_length=128))
    train_processes: int = Field(1, ge=1, description="DeepSpeed ranks: 1 in-process; more under the launcher.")
    tracking_uri: str = Field(
        "sqlite:///.cache/mlflow/mlflow.db", description="MLflow tracking store: a SQLite file in the project "
        "by default, or a server URL (credentials from the environment, never here)."
    )
    artifact_location: str | None = Field(
        ".cache/mlflow/artifacts", description="Where a new experiment keeps artifacts (local path or s3://); "
        "None lets a tracking server decide."
    )
    registered_model: str | None = Field(
        None, pattern=r"^[^/:@]+$", description="The MLflow registered model the trained checkpoint becomes a "
        "new version of (`models:/NAME/VERSION`). None: dualview-<mixture>-<backbone>, so runs that differ only "
        "in data or steps line up as versions of one model; name your own to keep an experiment's versions apart."
    )
    register_alias: str | None = Field(
        None, description="An alias (e.g. candidate) moved to the new version once it is registered, after "
        "evaluation in the pipeline: `models:/NAME@candidate` then names it. None: no alias moves, so what "
        "the alias pointed at stays in use until someone promotes a version."
    )

    @field_validator("register_alias")
    @classmethod
    def _an_alias_mlflow_takes(cls, alias: str | None) -> str | None:
        if alias is not None and (not _ALIAS.match(alias) or _RESERVED_ALIAS.match(alias)):
            raise ValueError(f"{alias!r} is not an alias: letters, digits, _ and -, and not 'latest' or a version "
                             "such as 'v3'")
        return alias

    @model_validator(mode="after")
    def _one_query_template(self) -> PipelineConfig:
        """A model is evaluated with the template it was trained with: two spellings of query ⊕
        instruction would score a model on text it never saw."""
        if self.training.query_template != self.evaluation.query_template:
            raise ValueError(f"training.query_template {self.training.query_template!r} and evaluation.query_template "
                             f"{self.evaluation.query_template!r} differ: a model must be evaluated with the template "
                             "it was trained with")
        return self

    def registered_name(self) -> str:
        """`registered_model`, or the name its mixture and backbone give (`registered_model_name`)."""
        return self.registered_model or registered_model_name(self.training.mixture.name, self.training.model)

    def output_options(self) -> dict:
        """Storage options of everything written under `workdir` (dualview_core.storage.layout's rule)."""
        return output_options(self.workdir_storage_options, self.seeds.storage_options)

    def layout(self) -> Layout:
        """The folders under `workdir` (dualview_core.storage.layout)."""
        return Layout(self.workdir)


class SweepConfig(ConfigModel):
    """A grid over mixtures, non-instruct ratios and seeds; one nested MLflow run per point."""

    pipeline: PipelineConfig = Field(default_factory=lambda: PipelineConfig(name="dualview-sweep"))
    mixtures: tuple[MixtureName, ...] = Field(
        ("ratio",), description="Mixtures to train. 'ratio' is expanded over `ratios`."
    )
    ratios: tuple[float, ...] = Field(
        (0.0, 0.25, 0.5), description="Fractions of non-instruct rows for the ratio mixture (the paper tried only 0.5)."
    )
    random_seeds: tuple[int, ...] = Field(
        (0,), description="Random seeds per point (each sets the mixture's and the training's seed): more seeds, "
        "tighter comparisons. Not the seed rows, which are `pipeline.seeds`.",
    )
    total: int | None = Field(None, gt=0, description="Rows per ratio mixture (fixed total); None: the data decides.")
    sizes: dict[MixtureName, int] = Field(
        default_factory=dict, description="N (the instruct-row budget, `mixture.size`) per mixture, before `scale`; a "
        "mixture not listed takes the training config's (None: the largest N every mixture reaches on the data). "
        "The paper's experiment: ins-orig and ins-dv 480000, all-orig and all-dv 440000.",
    )
    scale: float = Field(
        1.0, gt=0, description="One factor on every size in `sizes`: 0.01 trains the same proportions on 1% of "
        "the rows. An ins-dv size rounds down to even (half its seeds, each with both views).",
    )
