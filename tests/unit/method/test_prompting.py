"""Prompt rendering: fields in place, the static prefix identical across rows, versions from text."""

from __future__ import annotations

import pytest

from dualview_core.method.prompting import default_template, prompt_version, render, template_named
from dualview_core.data.seeds import SeedValidator
from dualview_core.data.sources import RawRow
from tests.helpers.factories import promptriever_row


def seed(query_id: str, n_inst_neg: int = 3) -> dict:
    return SeedValidator().check(RawRow(0, promptriever_row(query_id, n_inst_neg=n_inst_neg)))


def test_template_has_the_method_structure():
    t = default_template()
    for part in ("# Your goal", "# Terms", "# How to work", "# Rules", "# Answer format",
                 "<answer><new_instruction>", "<answer>None</answer>"):
        assert part in t
    assert t.count("\n1. ") == 1 and "\n5. " in t  # five steps


def test_fields_are_in_place_and_roles_assigned():
    s = seed("q1")
    system, user = render(s, 1, default_template())
    assert system == {"role": "system", "content": default_template()}
    assert user["role"] == "user"
    text = user["content"]
    assert text.startswith("QUERY: how do I store q1 seeds\nCURRENT INSTRUCTION: Only guidance for home gardeners is relevant.")
    a, b, others = text.index("PASSAGE A:"), text.index("PASSAGE B:"), text.index("OTHER PASSAGES:")
    assert a < b < others
    assert "Keep q1 seeds dry in a jar." in text[a:b]
    assert "Industrial silo storage 1 for q1." in text[b:others]  # target 1 is B
    assert "storage 0" in text[others:] and "storage 2" in text[others:] and "storage 1" not in text[others:]
    assert "q1-i1" not in text and "q1-pos" not in text  # never doc ids


def test_no_other_negatives_is_said_explicitly():
    _, user = render(seed("q1", n_inst_neg=1), 0, default_template())
    assert user["content"].endswith("OTHER PASSAGES:\n(none)")


def test_static_prefix_is_identical_across_rows_and_per_row_fields_come_last():
    t = default_template()
    first, second = render(seed("q1"), 0, t), render(seed("q2", n_inst_neg=2), 1, t)
    assert first[0] == second[0]  # the whole system message is shared
    assert first[1]["content"] != second[1]["content"]


@pytest.mark.parametrize("edit", [" ", "x", "\n"])
def test_version_is_the_hash_of_the_exact_text(edit):
    t = default_template()
    assert prompt_version(t) == prompt_version(str(t)) and len(prompt_version(t)) == 16
    assert prompt_version(t + edit) != prompt_version(t)


def test_seed_text_enters_the_prompt_as_data_and_an_echo_of_it_is_never_an_answer():
    from dualview_core.method.parsing import judge
    from tests.helpers.factories import PLANTED, hostile_row

    s = SeedValidator().check(RawRow(0, hostile_row("q1")))
    _, user = render(s, 0, default_template())
    text = user["content"]
    assert "<" not in text and ">" not in text
    assert text.count("&lt;answer&gt;") == 8  # query, instruction, title and text of A, B and the other negative
    for prefill in ("", "<answer><new_instruction>"):  # a model that repeats its input, with or without a prefill
        parsed = judge(prefill + text, s["instruction"], s["query"])
        assert parsed.rejection is not None and parsed.instruction != PLANTED


def test_the_papers_template_has_its_six_parts_and_five_steps():
    t = template_named("paper")
    for part in ("# Goal", "# Inputs", "# Definitions", "# Steps", "# Guardrails", "# Output",
                 "<answer><new_instruction>", "<answer>None</answer>", "REMAINING INSTRUCTION NEGATIVES"):
        assert part in t
    assert all(f"\n{i}. " in t for i in range(1, 6)) and "\n6. " not in t
    assert "First write your reasoning" in t and "hard, objectively checkable" in t
    assert prompt_version(t) != prompt_version(default_template())
    with pytest.raises(ValueError, match="unknown prompt 'long'; expected one of paper, compact"):
        template_named("long")


@pytest.mark.parametrize("n_inst_neg, listed", [(1, "(none)"), (2, "1. "), (4, "3. ")])
def test_the_papers_fields_list_the_remaining_instruction_negatives(n_inst_neg, listed):
    s = seed("q1", n_inst_neg=n_inst_neg)
    system, user = render(s, 0, template_named("paper"), "paper")
    assert system["content"] == template_named("paper")
    text = user["content"]
    assert text.startswith("QUERY: how do I store q1 seeds\nORIGINAL INSTRUCTION: Only guidance for home gardeners")
    labels = [text.index(x) for x in ("POSITIVE PASSAGE:", "TARGET PASSAGE:", "REMAINING INSTRUCTION NEGATIVES:")]
    assert labels == sorted(labels)
    assert "Keep q1 seeds dry in a jar." in text[labels[0]:labels[1]]
    assert "Industrial silo storage 0 for q1." in text[labels[1]:labels[2]]
    remaining = text[labels[2]:]
    assert listed in remaining and "storage 0" not in remaining
    assert all(f"Industrial silo storage {i} for q1." in remaining for i in range(1, n_inst_neg))
    assert "q1-i" not in text and "q1-pos" not in text


def test_the_config_offers_exactly_the_templates_there_are():
    from typing import get_args

    from dualview_core.config.synthesis import Prompt
    from dualview_core.method.prompting import PROMPTS

    assert set(get_args(Prompt)) == set(PROMPTS)
