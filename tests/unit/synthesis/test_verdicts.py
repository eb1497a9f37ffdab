"""The verification pass: its prompt, its cache key, and reading its verdict."""

from __future__ import annotations

import pytest

from dualview_core.method.parsing import Rejection
from dualview_core.method.prompting import prompt_version
from dualview_core.data.seeds import SeedValidator
from dualview_core.data.sources import RawRow
from dualview_core.synthesis.verdicts import Verdict, default_template, parse_verdict, render, verdict_rejection, verify_key
from tests.helpers.factories import promptriever_row

YES = "<verdict><satisfies>yes</satisfies><violates>yes</violates><on_topic>yes</on_topic></verdict>"


@pytest.mark.parametrize(
    "raw, verdict",
    [
        (YES, Verdict(True, True, True)),
        ("<verdict><satisfies> No </satisfies><violates>yes</violates><on_topic>YES</on_topic></verdict>", Verdict(False, True, True)),
        ("<satisfies>yes</satisfies> wait <satisfies>no</satisfies><violates>yes<on_topic>yes", Verdict(False, True, True)),
        ("<verdict><satisfies>yes</satisfies></verdict>", Verdict(True, None, None)),
        ("Yes, yes and yes.", Verdict(None, None, None)),
        (None, Verdict(None, None, None)),
    ],
)
def test_verdicts(raw, verdict):
    assert parse_verdict(raw) == verdict


def test_only_three_yeses_pass():
    assert verdict_rejection(Verdict(True, True, True)) is None
    for v in (Verdict(False, True, True), Verdict(True, False, True), Verdict(True, True, False), Verdict(True, None, True)):
        assert verdict_rejection(v) == Rejection.UNVERIFIED


def seed() -> dict:
    return SeedValidator().check(RawRow(0, promptriever_row("a", n_inst_neg=2)))


def test_prompt_shows_the_new_positive_first_and_the_old_positive_second():
    s = seed()
    system, user = render(s, 1, "Only silos.", default_template())
    assert system["content"] == default_template() and "<verdict>" in system["content"]
    assert user["content"] == ("QUERY: how do I store a seeds\nINSTRUCTION: Only silos.\n\n"
                               "PASSAGE 1:\nIndustrial silo storage 1 for a.\n\nPASSAGE 2:\nStoring\nKeep a seeds dry in a jar.")


def test_the_cache_key_follows_the_content():
    s = seed()
    args = ("v", "m", {"max_tokens": 48})
    base = verify_key(s["seed_key"], 0, "Only silos.", *args)
    assert base == verify_key(s["seed_key"], 0, "Only silos.", *args)
    assert len({base, verify_key(s["seed_key"], 0, "Only jars.", *args), verify_key(s["seed_key"], 1, "Only silos.", *args),
                verify_key(s["seed_key"], 0, "Only silos.", "w", "m", {"max_tokens": 48})}) == 4
    assert prompt_version(default_template()) != prompt_version(default_template() + " ")
