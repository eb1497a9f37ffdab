"""Dual-view rows: the polarity-reversed view of a seed under its synthesized instruction I_new.

Given a seed (q, I, P+, negatives, instruction negatives N1..Nk), target j and I_new:

    query       = q                      (unchanged)
    instruction = I_new
    positive    = N_j                    (the instruction negative becomes the answer)
    instruction_negatives = [P+] + [N_i, i != j]   (old positive first; the other N_i keep their role)
    negatives   = the seed's ordinary negatives

The other N_i stay instruction negatives, as the paper keeps them: its prompt asks the LLM to write
I_new so that they remain excluded, while N_j becomes included.

Owns that construction and the dual view's key. It does not know how I_new was obtained.
"""

from __future__ import annotations

from collections.abc import Mapping

from dualview_core.keys import canonical_json, digest


def dual_view_key(seed_key: str, target_index: int, instruction: str) -> str:
    return digest(canonical_json([seed_key, target_index, instruction]))


def make_dual_view(seed: Mapping, instruction: str, *, target_index: int = 0, prompt_version: str,
                   model_id: str) -> dict:
    """A DUAL_VIEW_ROW dict from a SEED_ROW dict. Raises ValueError if the target does not exist."""
    negatives_i = list(seed["instruction_negatives"])
    if not 0 <= target_index < len(negatives_i):
        raise ValueError(f"seed {seed['query_id']} has {len(negatives_i)} instruction negative(s); no target {target_index}")
    target = negatives_i.pop(target_index)
    return {
        "dual_view_key": dual_view_key(seed["seed_key"], target_index, instruction),
        "seed_key": seed["seed_key"],
        "query_id": seed["query_id"],
        "query": seed["query"],
        "instruction": instruction,
        "original_instruction": seed["instruction"],
        "positive": dict(target),
        "instruction_negatives": [dict(p) for p in list(seed["positives"]) + negatives_i],
        "negatives": [dict(p) for p in seed["negatives"]],
        "prompt_version": prompt_version,
        "model_id": model_id,
    }
