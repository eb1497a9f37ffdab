"""Prompt rendering: fields in place, the static prefix identical across rows, versions from text."""

from __future__ import annotations

import pytest

from dualview_core.method.prompting import default_template, prompt_version, render
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
