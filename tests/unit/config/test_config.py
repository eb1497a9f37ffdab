"""Cross-field rules of the configuration: what two stages must agree on is refused early."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dualview_core.config import EvaluationConfig, MixtureConfig, PipelineConfig, SweepConfig, TrainingConfig


def test_a_pipeline_whose_stages_spell_query_and_instruction_differently_is_refused():
    with pytest.raises(ValidationError, match="query_template"):
        PipelineConfig(training=TrainingConfig(query_template="{instruction} {query}"), evaluation=EvaluationConfig())


def test_one_template_for_both_stages_is_accepted_and_max_lengths_may_differ():
    template = "query: {query} instruction: {instruction}"
    p = PipelineConfig(training=TrainingConfig(query_template=template, max_length=128),
                       evaluation=EvaluationConfig(query_template=template, max_length=512))
    assert p.training.query_template == p.evaluation.query_template == template


def test_the_sweep_and_the_mixture_accept_the_same_mixture_names():
    names = ("ins-orig", "ins-dv", "all-orig", "all-dv", "ratio")
    assert SweepConfig(mixtures=names).mixtures == names
    assert [MixtureConfig(name=n).name for n in names] == list(names)
    with pytest.raises(ValidationError):
        SweepConfig(mixtures=("ins-dw",))


def test_random_seeds_of_a_sweep_are_not_its_seed_rows():
    s = SweepConfig(random_seeds=(0, 1, 2))
    assert s.random_seeds == (0, 1, 2) and s.pipeline.seeds.path.endswith(".jsonl")
    with pytest.raises(ValidationError):
        SweepConfig(seeds=(0, 1))  # the old name is refused, not silently ignored
