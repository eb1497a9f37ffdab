"""Parsing and guards: a table of what LLMs really send back, and each content rule."""

from __future__ import annotations

import pytest

from dualview_core.config import GuardConfig
from dualview_core.method.parsing import Rejection, guard, judge, parse, sentence_count, similarity

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
    ("<answer><new_instruction>\n   Only   documents\tabout offshore\u200b wind farms.  \n</new_instruction></answer>", OK, None),
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


# --- text outside the tags and chatter ------------------------------------------------------------

PREFILL = "<answer><new_instruction>"


@pytest.mark.parametrize(
    "raw, instruction, rejection",
    [
        # a server that answers from scratch after the prefill: its own block wins, the stray line is outside it
        (PREFILL + f"<think>weigh A and B</think>Reasoning done. <answer><new_instruction>{OK}</new_instruction></answer>", OK, None),
        (PREFILL + f"<answer><new_instruction>{OK}</new_instruction></answer>", OK, None),
        (PREFILL + "Reasoning done.\n<new_instruction>" + OK, OK, None),
        (PREFILL + "<answer>None</answer>", None, Rejection.NONE),
        # the same answers from a server that continues the prefill
        (PREFILL + OK + "</new_instruction></answer>", OK, None),
        (PREFILL + OK, OK, None),
        # a reply with no answer block, whatever it says
        ("Sure! Here is a new instruction: focus on measurements.", None, Rejection.NO_ANSWER),
        ("<think>Let me see.</think>Focus on measurements.", None, Rejection.NO_ANSWER),
    ],
)
def test_only_text_inside_the_tags_is_an_instruction(raw, instruction, rejection):
    assert (parse(raw).instruction, parse(raw).rejection) == (instruction, rejection)


CHATTY = [  # (what a model wrote inside the tags, the reason it is rejected)
    ("Sure! Here is a new instruction: focus on measurements.", Rejection.CHATTER),
    ("Sure, focus on measurements taken at sea.", Rejection.CHATTER),
    ("Certainly! Only sources from Canada.", Rejection.CHATTER),
    ("Of course. I want studies on children only.", Rejection.CHATTER),
    ("Okay, here is my attempt: only recent reviews.", Rejection.CHATTER),
    ("OK: only reports written for engineers.", Rejection.CHATTER),
    ("Alright, restrict this to urban schools.", Rejection.CHATTER),
    ("Absolutely! Focus on the nineteenth century.", Rejection.CHATTER),
    ("Great! I only care about budget options.", Rejection.CHATTER),
    ("Here is a new instruction that swaps them.", Rejection.CHATTER),
    ("Here's the revised version: only home remedies.", Rejection.CHATTER),
    ("Here are my conditions: rural clinics only.", Rejection.CHATTER),
    ("New instruction: only clinical trials in adults.", Rejection.CHATTER),
    ("Instruction: focus on hardware failures.", Rejection.CHATTER),
    ("Answer: documents about river flooding.", Rejection.CHATTER),
    ("Revised instruction: exclude anything before 2000.", Rejection.CHATTER),
    ("The new instruction is to prefer field studies.", Rejection.CHATTER),
    ("This instruction asks for coastal towns only.", Rejection.CHATTER),
    ("As an AI, I would focus on peer-reviewed work.", Rejection.CHATTER),
    ("As a language model I suggest: only tutorials.", Rejection.CHATTER),
    ("I cannot help with making B relevant.", Rejection.CHATTER),
    ("I can't provide an instruction for these.", Rejection.CHATTER),
    ("I'm sorry, but no condition separates them.", Rejection.CHATTER),
    ("Sorry, I only found one difference: the year.", Rejection.CHATTER),
    ("I am unable to find a sensible instruction.", Rejection.CHATTER),
    ("I apologize, focus on older machines.", Rejection.CHATTER),
    ("Only budget hotels. Hope this helps!", Rejection.CHATTER),
    ("Focus on wild birds. Let me know if you need more.", Rejection.CHATTER),
    ("Let me think: only data from satellites.", Rejection.CHATTER),
    ("Feel free to adjust: only metric units.", Rejection.CHATTER),
    ("I have written an instruction about island nations.", Rejection.CHATTER),
    ("Below is the instruction you asked for.", Rejection.CHATTER),
    ("Make passage B relevant and passage A not.", Rejection.META),
    ("Unlike the current instruction, include offshore sites.", Rejection.META),
    ("Wind farm subsidies", Rejection.SAME_AS_QUERY),
    ("Prefer offshore projects. Include costs. Ignore onshore ones.", Rejection.TOO_LONG),
]

CLEAN = [  # what searchers write: first person, imperative, negations, conditions
    "Only documents about offshore wind farms.",
    "I need studies from after 2015 that report measured outcomes.",
    "I'm looking for guides written for complete beginners.",
    "I only want sources that discuss coastal towns in Norway.",
    "Focus on measurements taken at sea rather than on land.",
    "Give me recipes that need no oven; baked dishes are not useful.",
    "My garden never sees frost, so I need warm-climate planting dates.",
    "I can't read German, so only English-language reports help me.",
    "I cannot use anything older than a decade for my thesis.",
    "Exclude opinion pieces; I want primary research only.",
    "Prefer answers aimed at nurses rather than physicians.",
    "Great Lakes shipping only; ocean ports do not matter to me.",
    "Here in Kenya, only prices in shillings are useful to me.",
    "Instructions for assembling the kit by hand are what I want.",
    "Answers from official government statistics only.",
    "Output figures for solar panels in winter are what I need.",
    "Yesterday's schedules are not relevant; I need the current timetable.",
    "Sure-footed hiking boots for wet rock, not trail runners.",
    "I want evaluations of large language model tools in classrooms.",
    "Documents about pediatric dosing, not adult dosing, are relevant.",
    "Only cases decided by appellate courts count.",
    "I am planning a trip with a wheelchair user, so accessibility details matter.",
    "Skip marketing material and show technical specifications.",
    "Include only experiments run on mice.",
    "I'd like historical accounts from before the First World War.",
    "Only passenger rail, not freight.",
    "Relevant documents describe small family farms, not agribusiness.",
    "Find reviews comparing the two phones' battery life.",
    "Show me maintenance tips for diesel engines only.",
    "Limit results to free, open-source software.",
    "Results should cover the Southern Hemisphere only.",
    "I will only accept sources written by practising electricians.",
]


@pytest.mark.parametrize("instruction, rejection", CHATTY)
def test_chatter_and_other_bad_outputs_are_rejected_with_their_reason(instruction, rejection):
    assert guard(instruction, ORIGINAL, QUERY) == rejection


@pytest.mark.parametrize("instruction", CLEAN)
def test_clean_instructions_pass_every_guard(instruction):
    assert guard(instruction, ORIGINAL, QUERY) is None


def test_the_tables_are_large_enough():
    assert len(CHATTY) >= 30 and len(CLEAN) >= 30


def test_entities_a_model_copies_from_the_escaped_prompt_come_out_as_plain_text():
    assert parse("<answer><new_instruction>Only R&amp;D budgets &lt;5 years old.</new_instruction></answer>").instruction \
        == "Only R&D budgets <5 years old."


REASONING_FIRST = [  # the paper's prompt: reasoning, then the answer block; and thinking models
    ("Step 1: profile.\nStep 4: checks pass.\n<answer><new_instruction>" + OK + "</new_instruction></answer>",
     OK, "Step 1: profile.\nStep 4: checks pass."),
    # a thinking model whose chat template opened <think> in the prompt: the reply starts inside it
    ("I could ask for <answer><new_instruction>Draft.</new_instruction></answer> but no.</think>\n"
     "<answer><new_instruction>" + OK + "</new_instruction></answer>", OK,
     "I could ask for <answer><new_instruction>Draft.</new_instruction></answer> but no.</think>"),
    ("<think>weigh levers</think>Step 5: short.<answer><new_instruction>" + OK + "</new_instruction></answer>",
     OK, "<think>weigh levers</think>Step 5: short."),
    ("<answer><new_instruction>" + OK + "</new_instruction></answer>", OK, None),  # the answer alone
    ("Step 4: no instruction can include B and exclude A.\n<answer>None</answer>", None,
     "Step 4: no instruction can include B and exclude A."),
    ("Step 1: profile, then the reply ran out of tokens", None, None),
]


@pytest.mark.parametrize("raw, instruction, thoughts", REASONING_FIRST)
def test_reasoning_before_the_answer_is_kept_apart_from_the_instruction(raw, instruction, thoughts):
    from dualview_core.method.parsing import reasoning

    assert parse(raw).instruction == instruction
    assert reasoning(raw) == thoughts
