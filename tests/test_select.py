"""Tests for graft_min.select_exchange: Eq. 4's gate, balancing and select-with-ties; and graft_min.exchange's
--random-prompts ablation: as many prompts as GRAFT selects, drawn from the whole batch."""

import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from graft_min import exchange, select_exchange


def test_hand_example_gate_and_balance():
    n = 4
    k_a = [2, 0, 3, 0, 1, 4, 0]
    k_b = [0, 2, 0, 0, 0, 0, 1]
    # A->B candidates (B all-fail, A mixed): q0 (k_a 2), q2 (3), q4 (1); q3 is all-fail on
    # both sides, q5 is all-success for A (never sent). B->A: q1 (k_b 2), q6 (1). m = 2.
    assert select_exchange(k_a, k_b, n, balance=False) == ([0, 2, 4], [1, 6])
    # top-2 of A's by k_a: q2 (3), q0 (2); q4 (1) is dropped
    assert select_exchange(k_a, k_b, n) == ([0, 2], [1, 6])


def test_ties_with_the_mth_candidate_are_kept():
    n = 8
    # A->B candidates with k_a = 5, 3, 3, 3, 1; B->A candidates: two (m = 2)
    k_a = [5, 3, 3, 3, 1, 0, 0]
    k_b = [0, 0, 0, 0, 0, 2, 7]
    a_to_b, b_to_a = select_exchange(k_a, k_b, n)
    assert a_to_b == [0, 1, 2, 3]  # 5 plus the three tied at 3 (the 2nd-ranked count)
    assert b_to_a == [5, 6]


def test_m_zero_means_no_exchange_either_way():
    n = 8
    k_a = [3, 5, 1, 8]
    k_b = [0, 0, 0, 2]  # A->B has 3 candidates; B->A: k_a never 0 -> none
    assert select_exchange(k_a, k_b, n) == ([], [])
    assert select_exchange(k_a, k_b, n, balance=False) == ([0, 1, 2], [])


def test_all_success_or_all_fail_source_is_never_sent():
    n = 4
    assert select_exchange([4, 0], [0, 0], n, balance=False) == ([], [])
    assert select_exchange([0, 4], [4, 0], n, balance=False) == ([], [])


def test_accepts_tensors_and_numpy():
    import numpy as np
    import torch
    k_a, k_b = [2, 0], [0, 1]
    expected = select_exchange(k_a, k_b, 4)
    assert expected == ([0], [1])
    assert select_exchange(torch.tensor(k_a), torch.tensor(k_b), 4) == expected
    assert select_exchange(np.array(k_a), np.array(k_b), 4) == expected


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="3 prompts but k_b has 2"):
        select_exchange([1, 2, 3], [0, 0], 4)
    with pytest.raises(ValueError, match="n=4"):
        select_exchange([5, 0], [0, 0], 4)


def _reference(k_a, k_b, n, balance):
    """A second, independent formulation: rank with a sort key, cut at position m."""
    out = []
    for src, recv in ((k_a, k_b), (k_b, k_a)):
        out.append({q for q in range(len(src)) if recv[q] == 0 and 0 < src[q] < n})
    if not balance:
        return out
    m = min(len(out[0]), len(out[1]))
    if m == 0:
        return [set(), set()]
    kept = []
    for cands, src in zip(out, (k_a, k_b)):
        order = sorted(cands, key=lambda q: -src[q])
        cutoff = src[order[m - 1]]
        kept.append(set(order[:m]) | {q for q in cands if src[q] == cutoff})
    return kept


@st.composite
def counts(draw):
    n = draw(st.integers(min_value=2, max_value=8))
    G = draw(st.integers(min_value=0, max_value=24))
    ks = st.lists(st.integers(min_value=0, max_value=n), min_size=G, max_size=G)
    return draw(ks), draw(ks), n


@settings(max_examples=400, deadline=None)
@given(counts(), st.booleans())
def test_property_gate_balance_and_reference(data, balance):
    k_a, k_b, n = data
    a_to_b, b_to_a = select_exchange(k_a, k_b, n, balance=balance)
    for sent, src, recv in ((a_to_b, k_a, k_b), (b_to_a, k_b, k_a)):
        assert sent == sorted(set(sent))
        for q in sent:
            assert 1 <= src[q] <= n - 1, "an all-fail or all-success peer group was sent"
            assert recv[q] == 0, "a receiver group with a success was touched"
    assert [set(a_to_b), set(b_to_a)] == _reference(k_a, k_b, n, balance)
    if balance:
        m = min(len(_reference(k_a, k_b, n, False)[0]), len(_reference(k_a, k_b, n, False)[1]))
        assert (len(a_to_b) == 0) == (len(b_to_a) == 0) == (m == 0)
        assert len(a_to_b) >= m and len(b_to_a) >= m


# ---------------------------------------------------------------- --random-prompts (App. G, count-matched)

def _k(k_a, k_b):
    return {"a": torch.tensor(k_a), "b": torch.tensor(k_b)}  # as train_step holds them


def test_random_prompts_draw_graft_s_count_per_receiver_from_the_whole_batch():
    n = 8
    k_a = [5, 3, 3, 3, 1, 0, 0, 8]
    k_b = [0, 0, 0, 0, 0, 2, 7, 8]
    # GRAFT: A -> B keeps q0 and the three tied at 3 (4 prompts), B -> A sends q5, q6 (2 prompts): as in
    # test_ties_with_the_mth_candidate_are_kept, plus q7, all-success for both (never a candidate)
    assert exchange(_k(k_a, k_b), n, True, 0, 8) == {"b": [0, 1, 2, 3], "a": [5, 6]}
    draws = {"a": [], "b": []}
    for seed in range(500):
        got = exchange(_k(k_a, k_b), n, True, 0, 8, random.Random(seed))
        assert got == exchange(_k(k_a, k_b), n, True, 0, 8, random.Random(seed))  # seeded: a resumed step agrees
        rng = random.Random(seed)  # the draw restated: B's prompts first, then A's, without replacement
        assert got == {"b": sorted(rng.sample(range(8), 4)), "a": sorted(rng.sample(range(8), 2))}
        for recv, count in (("b", 4), ("a", 2)):
            assert len(got[recv]) == count and got[recv] == sorted(set(got[recv]))
            draws[recv].append(tuple(got[recv]))
    for recv, count, subsets in (("b", 4, 70), ("a", 2, 28)):
        assert len(set(draws[recv])) == subsets  # every subset of the batch occurs: any receiver group, any source
        for q in range(8):  # uniform over the batch: prompt q drawn count / 8 of the time (500 draws: sd <= 0.022)
            assert abs(sum(q in d for d in draws[recv]) / 500 - count / 8) < 0.08
    # the receivers' own mixed or all-success groups and the sources' all-fail or all-success ones are drawn too
    assert any(7 in d for d in draws["b"]) and any(5 in d for d in draws["b"]) and any(0 in d for d in draws["a"])


def test_random_prompts_follow_graft_s_count_without_balance_and_draw_none_when_graft_sends_none():
    n = 4
    k_a, k_b = [2, 0, 3, 0, 1, 4, 0], [0, 2, 0, 0, 0, 0, 1]  # test_hand_example_gate_and_balance: 3 and 2 candidates
    got = exchange(_k(k_a, k_b), n, False, 0, 7, random.Random(3))
    assert (len(got["b"]), len(got["a"])) == (3, 2)
    got = exchange(_k(k_a, k_b), n, True, 0, 7, random.Random(3))
    assert (len(got["b"]), len(got["a"])) == (2, 2)
    assert exchange(_k([3, 5, 1, 8], [0, 0, 0, 2]), 8, True, 0, 4, random.Random(3)) == {"b": [], "a": []}  # m = 0


def test_random_prompts_are_one_draw_over_the_whole_batch_that_each_rank_cuts_to_its_share():
    k_a, k_b = [5, 3, 3, 3, 1, 0, 0, 8], [0, 0, 0, 0, 0, 2, 7, 8]
    for seed in range(20):
        whole = exchange(_k(k_a, k_b), 8, True, 0, 8, random.Random(seed))
        parts = [exchange(_k(k_a, k_b), 8, True, start, 4, random.Random(seed)) for start in (0, 4)]
        for recv in "ab":  # local indices on each rank; together exactly the whole batch's draw
            assert all(0 <= q < 4 for part in parts for q in part[recv])
            assert parts[0][recv] + [q + 4 for q in parts[1][recv]] == whole[recv]
