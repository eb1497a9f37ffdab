"""InfoNCE: closed-form values on hand-made vectors, and the batched path against a per-query loop."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dualview_core.method.loss import candidate_mask, info_nce, scatter_valid

PAD = -1


def naive_loss(queries, docs, candidates, first, in_batch, temperature) -> torch.Tensor:
    """One query at a time, candidates listed by hand from the rules in the module docstring."""
    rows, slots = len(candidates), len(candidates[0])
    losses = []
    for i in range(len(queries)):
        q_row = first + i
        positive_doc = candidates[q_row][0]
        logits = [float(queries[i] @ docs[q_row * slots]) / temperature]
        for r in range(rows):
            for s in range(slots):
                doc = candidates[r][s]
                if doc == PAD or (r == q_row and s == 0):
                    continue
                if r != q_row and not in_batch:
                    continue
                if doc == positive_doc:
                    continue
                logits.append(float(queries[i] @ docs[r * slots + s]) / temperature)
        losses.append(-logits[0] + math.log(sum(math.exp(x) for x in logits)))
    return torch.tensor(sum(losses) / len(losses))


def test_one_query_two_candidates_closed_form():
    q = torch.tensor([[1.0, 0.0]])  # (1, 2)
    docs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # positive cos 1, negative cos 0
    positives, allowed = candidate_mask(torch.tensor([[7, 8]]), 0, 1, in_batch=False)
    assert positives.tolist() == [0] and allowed.tolist() == [[True, True]]
    # -log(e^(1/τ) / (e^(1/τ) + e^0)) with τ = 0.5: log(1 + e^-2)
    assert info_nce(q, docs, positives, allowed, 0.5).item() == pytest.approx(math.log(1 + math.exp(-2)), abs=1e-6)


def test_mask_padding_in_batch_and_duplicate_of_the_positive():
    # row 0: positive 10, negatives 11, pad; row 1: positive 11, negatives 10 (row 0's positive), 12
    candidates = torch.tensor([[10, 11, PAD], [11, 10, 12]])
    positives, own_only = candidate_mask(candidates, 0, 2, in_batch=False)
    assert positives.tolist() == [0, 3]
    assert own_only.int().tolist() == [[1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]]
    _, in_batch = candidate_mask(candidates, 0, 2, in_batch=True)
    # query 0 never sees document 10 again (slot 4); query 1 never sees 11 as a negative (slot 1)
    assert in_batch.int().tolist() == [[1, 1, 0, 1, 0, 1], [1, 0, 0, 1, 1, 1]]


def test_queries_of_a_later_rank_use_their_offset():
    candidates = torch.tensor([[1, 2], [3, 4], [5, 6], [7, 8]])  # 2 ranks x 2 rows, gathered
    positives, allowed = candidate_mask(candidates, 2, 2, in_batch=False)
    assert positives.tolist() == [4, 6]
    assert allowed.int().tolist() == [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 1, 1]]


@pytest.mark.parametrize("temperature", [1.0, 0.02])  # at 1.0 every candidate's term matters
@pytest.mark.parametrize("in_batch", [False, True])
@pytest.mark.parametrize("first", [0, 3])
def test_batched_loss_equals_the_per_query_loop(in_batch, first, temperature):
    g = torch.Generator().manual_seed(0)
    rows, slots, dim, n_queries = 6, 4, 8, 3
    ids = torch.randint(0, 9, (rows, slots), generator=g)  # small id range: plenty of duplicates
    ids[torch.rand(rows, slots, generator=g) < 0.25] = PAD
    ids[:, 0] = torch.arange(100, 100 + rows)  # every row has a positive
    ids[1, 2] = 100 + 4  # row 1 lists row 4's positive as a negative
    queries = F.normalize(torch.randn(n_queries, dim, generator=g), dim=-1)
    docs = F.normalize(torch.randn(rows * slots, dim, generator=g), dim=-1)
    docs[1 * slots + 2] = docs[4 * slots]  # the same document has the same embedding wherever it sits
    positives, allowed = candidate_mask(ids, first, n_queries, in_batch)
    fast = info_nce(queries, docs, positives, allowed, temperature)
    slow = naive_loss(queries, docs, ids.tolist(), first, in_batch, temperature)
    assert fast.item() == pytest.approx(slow.item(), rel=1e-5)


def test_gradients_flow_through_scatter_and_padding_gets_none():
    candidates = torch.tensor([[1, 2, PAD], [3, PAD, PAD]])
    valid = torch.randn(3, 4, requires_grad=True)  # (n_valid, dim)
    full = scatter_valid(valid, candidates)  # (6, 4)
    assert full.shape == (6, 4) and torch.equal(full[[0, 1, 3]], valid) and not full[[2, 4, 5]].any()
    full.sum().backward()
    assert torch.equal(valid.grad, torch.ones(3, 4))


def test_positive_must_be_allowed():
    positives, allowed = candidate_mask(torch.tensor([[1, 2]]), 0, 1, in_batch=False)
    allowed[0, 0] = False
    with pytest.raises(ValueError, match="positive must be an allowed"):
        info_nce(torch.ones(1, 2), torch.ones(2, 2), positives, allowed, 0.02)
