"""Typed configuration, one module per stage, each the form of one flow:

    base        ConfigModel (frozen, unknown fields refused), Pooling, is_secret_name
    data        DataSource (seeds or an eval set), ValidationConfig
    synthesis   SynthesisConfig and its engines, sampling, guards, Ray Job
    training    MixtureConfig, TrainingConfig
    evaluation  EvaluationConfig
    pipeline_config  PipelineConfig, SweepConfig: the stages together, and what they must agree on
    profiles    named profiles (profiles/*.yaml) and how a run's own fields merge over them
    cluster     ClusterConfig: the Kubernetes deployment and what its manifests must agree on
    sizing      the 80B model's arithmetic (tensor parallel degree, KV cache, hours)

Every field documents its trade-off. Flows take these models (as overrides, dualview_core.config.profiles)
as parameters, so Prefect validates them and its UI renders them as forms. Environment variables
are read at the edges (tasks, CLI), never here.
"""

from dualview_core.config.base import SECRET_WORDS, ConfigModel, Pooling, is_secret_name
from dualview_core.config.data import DataSource, ValidationConfig
from dualview_core.config.evaluation import EvaluationConfig
from dualview_core.config.pipeline_config import PipelineConfig, SweepConfig
from dualview_core.config.synthesis import (GuardConfig, OpenAIEngineConfig, RayJobConfig, PluginEngineConfig,
                                            SamplingConfig, SynthesisConfig, VLLMEngineConfig)
from dualview_core.config.training import MixtureConfig, MixtureName, TrainingConfig

__all__ = ["SECRET_WORDS", "ConfigModel", "DataSource", "EvaluationConfig", "GuardConfig", "MixtureConfig",
           "MixtureName", "OpenAIEngineConfig", "PipelineConfig", "Pooling", "RayJobConfig", "PluginEngineConfig",
           "SamplingConfig", "SweepConfig", "SynthesisConfig", "TrainingConfig", "VLLMEngineConfig",
           "ValidationConfig", "is_secret_name"]
