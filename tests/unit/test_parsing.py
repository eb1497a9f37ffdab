"""Parsing and guards: a table of what LLMs really send back, and each content rule."""

from __future__ import annotations

import pytest

from dualview_core.config import GuardConfig
from dualview_core.parsing import Rejection, guard, judge, parse, sentence_count, similarity

OK = "Only documents about offshore wind farms."

NASTY = [
    (f"<answer><new_instruction>{OK}</new_instruction></answer>", OK, None),
    (f"<think>Let me think <answer>draft</answer></think><answer><new_instruction>{OK}</new_instruction></answer>", OK, None),
    (f"```xml\n<answer><new_instruction>{OK}</new_instruction></answer>\n```", OK, None),
    (f"Sure! Here it is:\n<answer><new_instruction>{OK}</new_instruction></answer>\nHope this helps.", OK, None),
    ("<answer><new_instruction>First try.</new_instruction></answer> Wait, better:"
     f" <answer><new_instruction>{OK}</new_instruction></answer>", OK, None),
    (f"<answer><new_instruction>{OK}", OK, None),  # unclosed, e.g. a stop string cut the tags
    (f"<answer><new_instruction>{OK}</answer>", OK, None),
    (f"<new_instruction>{OK}</new_instruction>", OK, None),  # wrapper dropped
    (f"<ANSWER><NEW_INSTRUCTION>{OK}</NEW_INSTRUCTION></ANSWER>", OK, None),
    (f"<answer><new_instruction>\n   Only   documents\tabout offshore\u200b wind farms.  \n</new_instruction></answer>", OK, None),
    ("<answer><new_instruction>“Only ﬁles from 2020.”</new_instruction></answer>", "Only files from 2020.", None),
    ("<answer>None</answer>", None, Rejection.NONE),
    ("<answer> none. </answer>", None, Rejection.NONE),
    ("<answer><new_instruction>None</new_instruction></answer>", None, Rejection.NONE),
    ("<answer><new_instruction>   </new_instruction></answer>", None, Rejection.EMPTY),
    ("I cannot do this.", None, Rejection.NO_ANSWER),
    ("", None, Rejection.NO_ANSWER),
    (None, None, Rejection.NO_ANSWER),
    ("<think>never finished", None, Rejection.NO_ANSWER),
]


@pytest.mark.parametrize("raw, instruction, rejection", NASTY)
def test_parser_table(raw, instruction, rejection):
    parsed = parse(raw)
    assert (parsed.instruction, parsed.rejection) == (instruction, rejection)


ORIGINAL = "I only want documents about onshore wind in Germany. Offshore projects are not relevant."
QUERY = "wind farm subsidies"


@pytest.mark.parametrize(
    "instruction, rejection",
    [
        (OK, None),
        ("Focus on offshore projects. Include costs. Skip onshore ones.", Rejection.TOO_LONG),
        ("Offshore " + "very " * 100 + "only.", Rejection.TOO_LONG),
        ("Wind farm subsidies.", Rejection.SAME_AS_QUERY),
        ("Make passage B relevant instead.", Rejection.META),
        ("Unlike the original instruction, offshore counts.", Rejection.META),
        ("Any document with docid 7 is relevant.", Rejection.META),
        ("I only want documents about onshore wind in Germany. Offshore projects are relevant.", Rejection.TOO_SIMILAR),
        ("", Rejection.EMPTY),
    ],
)
def test_each_guard(instruction, rejection):
    assert guard(instruction, ORIGINAL, QUERY) == rejection


def test_guard_thresholds_are_configurable():
    near_copy = "I only want documents about offshore wind in Germany. Onshore projects are not relevant."
    assert similarity(near_copy, ORIGINAL) >= 0.8
    assert guard(near_copy, ORIGINAL, QUERY) == Rejection.TOO_SIMILAR
    assert guard(near_copy, ORIGINAL, QUERY, GuardConfig(max_similarity=0.99)) is None
    assert guard("One. Two. Three.", ORIGINAL, QUERY, GuardConfig(max_sentences=3)) is None


def test_sentence_count_and_similarity_closed_forms():
    assert [sentence_count(t) for t in ("", "One.", "One. Two", "One! Two? Three.")] == [0, 1, 2, 3]
    assert similarity("a b c d", "a b c d") == 1.0
    assert similarity("a b c d", "e f g h") == 0.0
    assert similarity("a b c d", "a b x y") == pytest.approx(2 * 2 / 8)


def test_judge_combines_parse_and_guard():
    assert judge(f"<answer><new_instruction>{OK}</new_instruction></answer>", ORIGINAL, QUERY).rejection is None
    assert judge("<answer><new_instruction>Ignore passage A.</new_instruction></answer>", ORIGINAL, QUERY).rejection == Rejection.META
    assert judge("<answer>None</answer>", ORIGINAL, QUERY).rejection == Rejection.NONE
