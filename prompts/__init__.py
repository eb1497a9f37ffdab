"""Versioned prompt templates, shipped as package data.

A template's version is the hash of its exact text (`dualview_core.method.prompting.prompt_version`), so
editing a template changes every cache key built on it and old answers are never reused by mistake.
"""

from __future__ import annotations

from importlib.resources import files

POLARITY_REVERSAL = "polarity_reversal.md"  # compact: the answer only, for small models
POLARITY_REVERSAL_PAPER = "polarity_reversal_paper.md"  # the paper's: five reasoning steps, then the answer
VERIFICATION = "verification.md"  # the optional second pass (dualview_core/synthesis/verdicts.py)

# The polarity-reversal prompts a run may choose (`synthesis.prompt`), by name.
REVERSAL_PROMPTS = {"paper": POLARITY_REVERSAL_PAPER, "compact": POLARITY_REVERSAL}


def load(name: str = POLARITY_REVERSAL) -> str:
    return (files(__package__) / name).read_text(encoding="utf-8")
