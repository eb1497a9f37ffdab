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


def test_the_papers_prompt_gets_its_own_decoding_and_refuses_a_prefill():
    import pytest

    from dualview_core.config import SynthesisConfig
    from dualview_core.config.synthesis import SamplingConfig, prompt_sampling

    paper = SynthesisConfig(prompt="paper", sampling=prompt_sampling("paper"), vllm={"max_model_len": 8192})
    assert paper.sampling.prefill == "" and paper.sampling.stop == ("</answer>",) and paper.filtering == "guards"
    with pytest.raises(ValueError, match="reasoning before the answer"):
        SynthesisConfig(prompt="paper")  # the compact prompt's decoding opens the answer at once
    assert SynthesisConfig(filtering="verify").verify and not SynthesisConfig(filtering="none").verify
    qwen = SamplingConfig(temperature=0.7, top_p=0.8, top_k=20)
    assert qwen.engine_params() == {"temperature": 0.7, "max_tokens": 1024, "repetition_penalty": 1.0, "seed": 0,
                                         "top_p": 0.8, "top_k": 20}
    # the cache key names the truncation knobs only where set
    assert "top_p" not in SamplingConfig().key() and qwen.key()["top_k"] == 20


def test_the_registered_model_is_named_after_mixture_and_backbone_unless_named():
    from dualview_core.config.profiles import resolve

    assert PipelineConfig().registered_name() == "dualview-all-dv-minilm"
    assert resolve("cluster").registered_name() == "dualview-ins-dv-gte-multilingual-mlm-base"
    # derived when asked, so a caller's mixture over the profile's renames the model too
    assert resolve("cpu", {"training": {"mixture": {"name": "ins-orig"}}}).registered_name() == "dualview-ins-orig-minilm"
    hub = PipelineConfig(training=TrainingConfig(model="BAAI/bge-m3-retromae", max_length=128))
    assert hub.registered_name() == "dualview-ins-dv-bge-m3-retromae"
    assert PipelineConfig(registered_model="mine").registered_name() == "mine"
    with pytest.raises(ValidationError, match="registered_model"):
        PipelineConfig(registered_model="a/b")  # `models:/a/b/1` would not name it


@pytest.mark.parametrize("alias", ["latest", "v3", "V12", "two words", "x@y", ""])
def test_an_alias_the_registry_would_refuse_or_misread_is_refused(alias):
    with pytest.raises(ValidationError, match="register_alias"):
        PipelineConfig(register_alias=alias)


def test_aliases_of_letters_digits_underscores_and_dashes_are_accepted():
    assert [PipelineConfig(register_alias=a).register_alias for a in ("candidate", "champion_2", "v3-rc")] == [
        "candidate", "champion_2", "v3-rc"]
