"""Pooling: (batch, seq, dim) token states and their attention mask -> one vector per text.

Owns the math of the six modes sentence-transformers defines, written to give its numbers (6.2,
padded inputs) on right- and left-padded batches alike:

    cls                   the first real token (after left padding, if any)
    max                   the elementwise max over real tokens
    mean                  the mean of real tokens
    mean_sqrt_len_tokens  their sum / sqrt(count)
    weightedmean          positions weighted 1, 2, 3, ... from the first real token
    lasttoken             the last real token (LLM embedders)

Several modes are concatenated in the order given. With `prompt_length` (a folder whose Pooling has
include_prompt=false), the prompt's tokens are left out of the pool. It does not normalise (that is
a Normalize step of the folder) and knows nothing about models or files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dualview_core.model_folder import check_pooling

if TYPE_CHECKING:
    import torch


def without_prompt(mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """The mask with the first `prompt_length` real tokens of each row set to 0 (a copy)."""
    import torch

    mask = mask.clone()  # (batch, seq)
    pad = mask.to(torch.int32).argmax(dim=1)  # (batch,) left padding per row
    if int(pad.sum()) == 0:
        mask[:, :prompt_length] = 0
    else:
        positions = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)  # (1, seq)
        mask[positions < (pad + prompt_length).unsqueeze(1)] = 0
    return mask


def _one(mode: str, hidden: torch.Tensor, mask: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    import torch

    acc = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
    batch, seq, dim = hidden.shape
    if mode == "cls":
        first = mask.to(torch.int).argmax(dim=1)  # (batch,)
        return hidden.gather(1, first.view(-1, 1, 1).expand(-1, 1, dim)).squeeze(1)  # (batch, dim)
    if mode == "max":
        keep = mask.unsqueeze(-1).expand_as(hidden).to(hidden.dtype)  # (batch, seq, dim)
        return hidden.masked_fill(keep == 0, float("-inf")).max(dim=1).values  # (batch, dim)
    if mode in ("mean", "mean_sqrt_len_tokens"):
        weights = mask.unsqueeze(-1).to(hidden.dtype)  # (batch, seq, 1)
        total = (hidden * weights).sum(dim=1, dtype=acc)  # (batch, dim)
        count = weights.sum(dim=1, dtype=acc).clamp(min=1e-9)  # (batch, 1)
        return (total / (count if mode == "mean" else count.sqrt())).to(hidden.dtype)  # (batch, dim)
    if mode == "weightedmean":
        positions = torch.arange(1, seq + 1, device=hidden.device, dtype=acc).view(1, -1, 1)  # (1, seq, 1)
        positions = positions - original.to(torch.int32).argmax(dim=1).view(-1, 1, 1)  # from the first real token
        weights = mask.unsqueeze(-1).to(acc) * positions  # (batch, seq, 1)
        return ((hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)).to(hidden.dtype)  # (batch, dim)
    # lasttoken: the last position whose mask is 1 (the last position when a row has none)
    values, from_end = mask.flip(1).max(1)  # (batch,) each
    from_end = torch.where(values == 0, seq - 1, from_end)
    index = (seq - from_end - 1).view(-1, 1, 1).expand(-1, 1, dim)  # (batch, 1, dim)
    return (hidden * mask.unsqueeze(-1).to(hidden.dtype)).gather(1, index).squeeze(1)  # (batch, dim)


def pool(hidden: torch.Tensor, mask: torch.Tensor, modes: tuple[str, ...] | str,
         prompt_length: int | None = None) -> torch.Tensor:
    """(batch, seq, dim) -> (batch, len(modes) * dim), not normalised."""
    import torch

    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    check_pooling(modes)
    used = without_prompt(mask, prompt_length) if prompt_length else mask
    return torch.cat([_one(m, hidden, used, mask) for m in modes], dim=-1)
