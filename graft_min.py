"""
graft-min: GRAFT (arXiv 2609.37868) co-training of two language models with GRPO.

This file will hold the readable training loop (Algorithm 1). For now it holds the rule
that decides WHICH groups are exchanged (Eq. 4 plus balancing with ties).
"""

import argparse


def select_exchange(k_a, k_b, n, balance=True):
    """Eq. 4 + balanced exchange: which prompts each model sends to the other.

    k_a, k_b: per-prompt success counts (length G) of models A and B, each in [0, n].
    Candidates for A -> B are the prompts where B failed every rollout (k_b = 0) and A's
    group is mixed (1 <= k_a < n); symmetrically for B -> A.
    With balance, m = min(|C_ab|, |C_ba|); each direction keeps its top-m candidates by the
    source's success count, plus every candidate tied with the m-th; m = 0 means no exchange
    in either direction. Without balance (stored-peer mode) all candidates are returned.
    Returns (a_to_b, b_to_a): sorted lists of prompt indices.
    """
    k_a, k_b = [int(k) for k in k_a], [int(k) for k in k_b]
    if len(k_a) != len(k_b):
        raise ValueError(f"select_exchange: k_a has {len(k_a)} prompts but k_b has {len(k_b)}")
    bad = [k for k in k_a + k_b if not 0 <= k <= n]
    if bad:
        raise ValueError(f"select_exchange: success counts must lie in [0, n={n}], got {bad[:5]}")

    def candidates(k_src, k_recv):
        return [q for q in range(len(k_src)) if k_recv[q] == 0 and 1 <= k_src[q] < n]

    a_to_b, b_to_a = candidates(k_a, k_b), candidates(k_b, k_a)
    if not balance:
        return a_to_b, b_to_a
    m = min(len(a_to_b), len(b_to_a))
    if m == 0:
        return [], []

    def top_m_with_ties(cands, k_src):
        ranked = sorted((k_src[q] for q in cands), reverse=True)
        threshold = ranked[m - 1]  # success count of the m-th candidate
        return [q for q in cands if k_src[q] >= threshold]

    return top_m_with_ties(a_to_b, k_a), top_m_with_ties(b_to_a, k_b)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args()
    print("graft_min: the training loop is not written yet; run the tests with `python -m pytest -q`.")


if __name__ == "__main__":
    main()
