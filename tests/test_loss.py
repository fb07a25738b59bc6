"""Tests for loss.py: hand-computed numbers (one per pitfall of the loss
contracts), gradients, and an independent per-token reference on random tensors."""

import math

import pytest
import torch

import loss


# ---------------------------------------------------------------- Eq. 1: advantages

def test_advantages_one_success_uses_sample_std():
    # mean 0.25, sample std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5 -> [1.5, -0.5, -0.5, -0.5]
    adv = loss.group_advantages(torch.tensor([[1.0, 0, 0, 0]]))
    torch.testing.assert_close(adv, torch.tensor([[1.5, -0.5, -0.5, -0.5]]), atol=1e-5, rtol=0)
    # population std would give sqrt(3) = 1.732 for the success: must not
    assert abs(adv[0, 0].item() - math.sqrt(3)) > 0.1


def test_advantages_two_of_four():
    # mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.57735 -> +-0.866025
    adv = loss.group_advantages(torch.tensor([[1.0, 1, 0, 0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.866025, 0.866025, -0.866025, -0.866025]]), atol=1e-5, rtol=0)


def test_advantages_eps_in_denominator():
    # std 0.5 exactly; the eps = 1e-6 sits in the denominator: 0.75 / 0.500001
    adv = loss.group_advantages(torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64), eps=1e-6)
    assert abs(adv[0, 0].item() - 0.75 / 0.500001) < 1e-6
    adv_big = loss.group_advantages(torch.tensor([[1.0, 0, 0, 0]]), eps=0.5)
    assert abs(adv_big[0, 0].item() - 0.75) < 1e-6


@pytest.mark.parametrize("group", [[0.0] * 8, [1.0] * 8, [0.3] * 5, [0.1, 0.1, 0.1]])
def test_advantages_zero_variance_is_exactly_zero(group):
    adv = loss.group_advantages(torch.tensor([group]))
    assert torch.equal(adv, torch.zeros_like(adv))


def test_advantages_rows_are_independent_groups():
    r = torch.tensor([[1.0, 0, 0, 0], [0.0, 0, 0, 0], [1.0, 1, 1, 0]])
    adv = loss.group_advantages(r)
    torch.testing.assert_close(adv[0], torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5, rtol=0)
    assert torch.equal(adv[1], torch.zeros(4))
    torch.testing.assert_close(adv[2], torch.tensor([0.5, 0.5, 0.5, -1.5]), atol=1e-5, rtol=0)


def test_advantages_reject_groups_of_one():
    with pytest.raises(ValueError, match="n >= 2"):
        loss.group_advantages(torch.tensor([[1.0], [0.0]]))


# ---------------------------------------------------------------- Eq. 6: mean log-prob

def test_mean_logprob_masked_only_with_garbage():
    lp = torch.tensor([[-1.0, -2.0, -3.0, 1e4], [-4.0, -1e4, float("inf"), 7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    torch.testing.assert_close(loss.mean_logprob(lp, mask), torch.tensor([-2.0, -4.0]))


def test_mean_logprob_rejects_empty_rows():
    with pytest.raises(ValueError, match="rows \\[1\\]"):
        loss.mean_logprob(torch.zeros(2, 3), torch.tensor([[1, 0, 0], [0, 0, 0]]))


# ---------------------------------------------------------------- Eqs. 7-8: compatibility

def test_equal_logprobs_give_s_one_and_w_one():
    m = torch.tensor([-0.7, -2.3, -0.01])
    assert torch.equal(loss.compatibility_score(m, m.clone()), torch.ones(3))
    assert torch.equal(loss.compatibility_weight(m, m.clone()), torch.ones(3))


def test_compatibility_weight_hand_values():
    src = torch.tensor([-1.0, -1.0, -1.0, -1.0, -1.0])
    recv = torch.tensor([-1.1, -0.5, -1.0 + math.log(0.81), -1.0 + math.log(0.79), -30.0])
    s = loss.compatibility_score(recv, src)
    w = loss.compatibility_weight(recv, src, delta=0.8)
    torch.testing.assert_close(s, torch.tensor([math.exp(-0.1), math.exp(0.5), 0.81, 0.79, math.exp(-29.0)]))
    # s = 0.905 kept at s; s = 1.65 capped at 1; 0.81 kept; 0.79 and ~0 dropped
    torch.testing.assert_close(w, torch.tensor([math.exp(-0.1), 1.0, 0.81, 0.0, 0.0]))


def test_compatibility_floor_is_strict():
    recv, src = torch.tensor([-1.3]), torch.tensor([-1.0])
    s = loss.compatibility_score(recv, src).item()
    assert loss.compatibility_weight(recv, src, delta=s).item() == 0.0  # s == delta: dropped
    assert loss.compatibility_weight(recv, src, delta=s - 1e-6).item() == pytest.approx(s)


def test_delta_zero_keeps_everything_with_cap():
    recv, src = torch.tensor([-5.0, -1.0, 0.0]), torch.tensor([-1.0, -1.0, -2.0])
    w = loss.compatibility_weight(recv, src, delta=0.0)
    torch.testing.assert_close(w, torch.tensor([math.exp(-4.0), 1.0, 1.0]))


def test_compatibility_weight_has_no_gradient():
    recv = torch.tensor([-1.0, -2.0], requires_grad=True)
    w = loss.compatibility_weight(recv, torch.tensor([-1.1, -1.9]))
    assert not w.requires_grad


# ---------------------------------------------------------------- Eqs. 2, 9, 10: policy loss

def _one_token(a, rho, w=1.0):
    old = torch.tensor([[-1.0]])
    lp = (old + math.log(rho)).clone().requires_grad_(True)
    out, stats = loss.policy_loss(lp, old, torch.tensor([a]), torch.tensor([w]), torch.ones(1, 1))
    out.backward()
    return out.item(), lp.grad.item(), stats


def test_clip_positive_advantage_high_ratio_is_clipped():
    value, grad, stats = _one_token(1.0, 1.5)  # min(1.5, 1.28) = 1.28, clipped branch: no gradient
    assert value == pytest.approx(-1.28, abs=1e-6)
    assert grad == 0.0
    assert stats["clip_frac"] == 1.0


def test_clip_negative_advantage_low_ratio_is_clipped():
    value, grad, stats = _one_token(-1.0, 0.5)  # min(-0.5, -0.8) = -0.8, no gradient
    assert value == pytest.approx(0.8, abs=1e-6)
    assert grad == 0.0
    assert stats["clip_frac"] == 1.0


def test_clip_negative_advantage_high_ratio_flows():
    value, grad, stats = _one_token(-1.0, 1.5)  # min(-1.5, -1.28) = -1.5, unclipped
    assert value == pytest.approx(1.5, abs=1e-6)
    assert grad == pytest.approx(1.5, abs=1e-5)  # d(-rho*a)/dlogp = -a*rho = 1.5
    assert stats["clip_frac"] == 0.0


def test_clip_positive_advantage_inside_range_unclipped():
    value, grad, stats = _one_token(2.0, 1.25)  # 1.25 < 1.28: unclipped, J = 2.5
    assert value == pytest.approx(-2.5, abs=1e-6)
    assert grad == pytest.approx(-2.5, abs=1e-5)
    assert stats["clip_frac"] == 0.0


def test_clip_low_side_uses_eps_low_not_eps_high():
    value, grad, _ = _one_token(-1.0, 0.75)  # 0.75 < 0.8: clipped at 0.8
    assert value == pytest.approx(0.8, abs=1e-6) and grad == 0.0
    value, grad, _ = _one_token(-1.0, 0.85)  # inside [0.8, 1.28]: unclipped
    assert value == pytest.approx(0.85, abs=1e-6) and grad == pytest.approx(0.85, abs=1e-5)


def test_weight_scales_value_and_gradient():
    value, grad, _ = _one_token(-1.0, 1.5, w=0.9)
    assert value == pytest.approx(1.35, abs=1e-6)
    assert grad == pytest.approx(1.35, abs=1e-5)


def test_gradient_at_ratio_one_is_token_mean_policy_gradient():
    torch.manual_seed(0)
    B, T = 3, 5
    lp = (-torch.rand(B, T) * 3).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    adv = torch.tensor([1.5, -0.5, 0.25])
    out, _ = loss.policy_loss(lp, lp.detach(), adv, torch.ones(B), mask)
    (g,) = torch.autograd.grad(out, lp)
    lp2 = lp.detach().clone().requires_grad_(True)
    ref = -(adv[:, None] * lp2 * mask).sum() / mask.sum()  # -A * log pi, token-mean
    (g_ref,) = torch.autograd.grad(ref, lp2)
    torch.testing.assert_close(g, g_ref)
    assert out.item() == pytest.approx(-(adv[:, None] * mask).sum().item() / mask.sum().item(), abs=1e-6)


def test_token_mean_aggregation_lengths_2_and_4():
    # per-token values 1 (length 2) and 3 (length 4): token-mean (2 + 12) / 6 = 2.333, not 2.0
    lp = torch.full((2, 4), -1.0)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    out, stats = loss.policy_loss(lp, lp.clone(), torch.tensor([1.0, 3.0]), torch.ones(2), mask)
    assert out.item() == pytest.approx(-14 / 6, abs=1e-6)
    assert stats["n_tokens"] == 6


def test_divisor_is_unweighted_token_count():
    lp = torch.full((2, 4), -1.0)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    out, _ = loss.policy_loss(lp, lp.clone(), torch.tensor([1.0, 3.0]), torch.tensor([0.5, 1.0]), mask)
    assert out.item() == pytest.approx(-(2 * 0.5 + 12) / 6, abs=1e-6)  # not / (0.5 * 2 + 4)


def test_padding_garbage_changes_neither_loss_nor_gradient():
    torch.manual_seed(1)
    B, T = 4, 6
    lens = torch.tensor([6, 3, 1, 4])
    mask = (torch.arange(T)[None, :] < lens[:, None]).float()
    base = -torch.rand(B, T) * 2
    old = base + 0.3 * torch.randn(B, T)
    adv, w = torch.randn(B), torch.rand(B)
    garbage = torch.where(torch.rand(B, T) < 0.5, 1e4, -1e4)
    results = []
    for fill_lp, fill_old in [(0.0, 0.0), (garbage, -garbage), (-garbage, garbage)]:
        lp = torch.where(mask.bool(), base, fill_lp).requires_grad_(True)
        old_g = torch.where(mask.bool(), old, fill_old)
        out, _ = loss.policy_loss(lp, old_g, adv, w, mask)
        (g,) = torch.autograd.grad(out, lp)
        assert torch.isfinite(g).all()
        results.append((out.detach(), g))
    for out, g in results[1:]:
        assert torch.equal(out, results[0][0])
        assert torch.equal(g, results[0][1])
    assert (results[0][1][~mask.bool()] == 0).all()


def test_no_gradient_through_advantages_or_weights():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([1.0], requires_grad=True)
    w = torch.tensor([0.9], requires_grad=True)
    out, _ = loss.policy_loss(lp, lp.detach() - 0.1, adv, w, torch.ones(1, 2))
    out.backward()
    assert adv.grad is None and w.grad is None and lp.grad is not None


def test_empty_minibatch_raises():
    with pytest.raises(ValueError, match="no masked tokens"):
        loss.policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1), torch.zeros(1, 2))


def _reference_objective(lp, old, adv, w, mask, eps_low, eps_high):
    """Independent per-token loop in plain Python floats (Eq. 10)."""
    total, count = 0.0, 0
    for j in range(len(lp)):
        for t in range(len(lp[j])):
            if mask[j][t]:
                rho = math.exp(lp[j][t] - old[j][t])
                clipped = min(max(rho, 1 - eps_low), 1 + eps_high)
                total += w[j] * min(rho * adv[j], clipped * adv[j])
                count += 1
    return total / count


def test_policy_loss_matches_independent_reference_on_random_tensors():
    g = torch.Generator().manual_seed(7)
    for trial in range(20):
        B, T = 1 + trial % 5, 1 + (3 * trial) % 9
        lp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 4
        old = lp + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)
        adv = torch.randn(B, generator=g, dtype=torch.float64)
        w = torch.rand(B, generator=g, dtype=torch.float64)
        lens = torch.randint(1, T + 1, (B,), generator=g)
        mask = torch.arange(T)[None, :] < lens[:, None]
        out, stats = loss.policy_loss(lp, old, adv, w, mask, 0.2, 0.28)
        ref = _reference_objective(lp.tolist(), old.tolist(), adv.tolist(), w.tolist(), mask.tolist(), 0.2, 0.28)
        assert out.item() == pytest.approx(-ref, rel=1e-10, abs=1e-12)
        # clip fraction counted by hand
        rho = torch.exp(lp - old)
        n_clip = (((adv[:, None] > 0) & (rho > 1.28)) | ((adv[:, None] < 0) & (rho < 0.8)))[mask].sum().item()
        assert stats["clip_frac"] == pytest.approx(n_clip / mask.sum().item())


def test_policy_loss_gradcheck_float64():
    g = torch.Generator().manual_seed(3)
    lp = (-torch.rand(3, 4, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    old = lp.detach() + 0.5 * torch.randn(3, 4, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.7, 0.4], dtype=torch.float64)
    w = torch.tensor([1.0, 0.85, 0.95], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    # keep every ratio away from the clip kinks so finite differences are valid
    rho = torch.exp(lp.detach() - old)
    assert ((rho - 0.8).abs() > 1e-3).all() and ((rho - 1.28).abs() > 1e-3).all()
    assert torch.autograd.gradcheck(lambda x: loss.policy_loss(x, old, adv, w, mask)[0], (lp,))


def test_clipped_token_mask_marks_only_zero_gradient_tokens():
    old = torch.zeros(1, 4)
    lp = torch.log(torch.tensor([[1.5, 1.1, 0.5, 1.5]]))
    adv = torch.tensor([1.0])
    m = loss.clipped_token_mask(lp, old, adv, torch.tensor([[1, 1, 1, 0]]))
    assert m.tolist() == [[True, False, False, False]]  # 4th token is padding
    m_neg = loss.clipped_token_mask(lp, old, torch.tensor([-1.0]), torch.ones(1, 4))
    assert m_neg.tolist() == [[False, False, True, False]]


# ---------------------------------------------------------------- --seq-ratio: one sequence-level ratio per peer row

def _seq_case():
    """Four rows, T = 3, float64, padding holding +-1e4 garbage. Token ratios (exp of logprobs - old):
    row 0 (token ratios) [1.5, 1.1], a = +1, w 1; row 1 (sequence) [1.44, 1.0], a = +1, w 0.5;
    row 2 (sequence) [0.25, 1, 1], a = -1, w 1; row 3 (sequence) [2.0, 1.0], a = -1, w 1."""
    ratios = [[1.5, 1.1, None], [1.44, 1.0, None], [0.25, 1.0, 1.0], [2.0, 1.0, None]]
    old = torch.tensor([[-1.0, -2.0, 1e4], [-0.5, -1.5, -1e4], [-2.0, -0.3, -1.0], [-1.2, -0.7, 1e4]], dtype=torch.float64)
    mask = torch.tensor([[r is not None for r in row] for row in ratios])
    lp = torch.tensor([[o + math.log(r) if r is not None else -o for o, r in zip(orow, row)]
                       for orow, row in zip(old.tolist(), ratios)], dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    w = torch.tensor([1.0, 0.5, 1.0, 1.0], dtype=torch.float64)
    return lp, old, adv, w, mask, torch.tensor([False, True, True, True])


def test_sequence_ratio_hand_values_and_gradient():
    lp, old, adv, w, mask, seq = _seq_case()
    lp.requires_grad_(True)
    out, stats = loss.policy_loss(lp, old, adv, w, mask, 0.2, 0.28, seq_ratio=seq)
    (g,) = torch.autograd.grad(out, lp)
    # row 0, token ratios: min(1.5, 1.28) + 1.1 = 2.38; gradient only on the second token (1.1)
    # row 1: s = sqrt(1.44 * 1.0) = 1.2, inside the clip range: 0.5 * 2 tokens * 1.2 = 1.2; each token's gradient
    #   w a s = 0.6, the first token's too (its own ratio 1.44 would be clipped)
    # row 2: s = 0.25^(1/3) = 0.63 < 0.8 with a < 0: clipped, 3 tokens * -0.8 = -2.4, no gradient on any token
    # row 3: s = sqrt(2) = 1.41421 with a < 0: unclipped, 2 * -1.41421; each token's gradient w a s = -1.41421
    N = 9  # token-mean divisor: 2 + 2 + 3 + 2, every token once
    J = (2.38 + 1.2 - 2.4 - 2 * math.sqrt(2)) / N
    assert out.item() == pytest.approx(-J, abs=1e-12)
    expected = torch.tensor([[0, -1.1, 0], [-0.6, -0.6, 0], [0, 0, 0], [math.sqrt(2), math.sqrt(2), 0]],
                            dtype=torch.float64) / N  # d(-J)/d logp
    torch.testing.assert_close(g, expected, atol=1e-12, rtol=0)
    assert stats["clip_frac"] == pytest.approx((1 + 3) / N)  # row 0's first token; all of row 2
    # the same tensors with token ratios everywhere: row 1's first token clipped (1.28 + 1.0), row 2's tokens each
    # max(rho, 0.8) * -1 = -0.8 -1 -1, row 3's -2 - 1: the flag changes the numbers
    token, _ = loss.policy_loss(lp.detach(), old, adv, w, mask, 0.2, 0.28)
    assert token.item() == pytest.approx(-(2.38 + 0.5 * 2.28 - 2.8 - 3.0) / N, abs=1e-12)


def test_clipped_token_mask_with_sequence_ratio_is_all_or_nothing_per_row():
    lp, old, adv, w, mask, seq = _seq_case()
    assert loss.clipped_token_mask(lp, old, adv, mask, seq_ratio=seq).tolist() == [
        [True, False, False], [False, False, False], [True, True, True], [False, False, False]]
    assert loss.clipped_token_mask(lp, old, adv, mask).tolist() == [  # token ratios: each token on its own
        [True, False, False], [True, False, False], [True, False, False], [False, False, False]]


def test_sequence_ratio_off_or_all_false_leaves_value_and_gradient_bit_equal():
    lp, old, adv, w, mask, _ = _seq_case()
    results = []
    for seq in (None, torch.zeros(4, dtype=torch.bool)):
        x = lp.clone().requires_grad_(True)
        out, stats = loss.policy_loss(x, old, adv, w, mask, seq_ratio=seq)
        results.append((out.detach(), torch.autograd.grad(out, x)[0], stats))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert results[0][2] == results[1][2]


def test_sequence_ratio_at_ratio_one_has_the_token_level_gradient():
    # at theta = theta_old every ratio is 1 and d s_j / d logp_jt = 1 / |o_j|: each row's |o_j| tokens add up to
    # the token-level policy gradient, so the first minibatch (and --grad-split) is the same under --seq-ratio
    torch.manual_seed(0)
    lp = -torch.rand(3, 5, dtype=torch.float64) * 3
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    adv, w = torch.tensor([1.5, -0.5, 0.25], dtype=torch.float64), torch.tensor([1.0, 0.7, 0.9], dtype=torch.float64)
    grads = []
    for seq in (None, torch.ones(3, dtype=torch.bool)):
        x = lp.clone().requires_grad_(True)
        out, _ = loss.policy_loss(x, lp, adv, w, mask, seq_ratio=seq)
        grads.append((out.item(), torch.autograd.grad(out, x)[0]))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-12)
    torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-12, rtol=0)


def _reference_with_sequence_rows(lp, old, adv, w, mask, seq, eps_low, eps_high):
    """Independent plain-Python reference of -J and d(-J)/d logp: rows in seq take s_j = exp(mean_t(logp - old))
    over their masked tokens for every token; a token's gradient is -w a ratio / N where the unclipped branch of
    the min is taken (for a sequence row, d s_j / d logp_jt = s_j / |o_j|, summed over its |o_j| tokens' values)."""
    count = sum(sum(1 for t in row if t) for row in mask)
    value, grad = 0.0, [[0.0] * len(row) for row in lp]
    for j in range(len(lp)):
        tokens = [t for t in range(len(lp[j])) if mask[j][t]]
        s = math.exp(sum(lp[j][t] - old[j][t] for t in tokens) / len(tokens))
        for t in tokens:
            rho = s if seq[j] else math.exp(lp[j][t] - old[j][t])
            clipped = min(max(rho, 1 - eps_low), 1 + eps_high)
            value += w[j] * min(rho * adv[j], clipped * adv[j])
            flows = not ((adv[j] > 0 and rho > 1 + eps_high) or (adv[j] < 0 and rho < 1 - eps_low))
            if flows and seq[j]:
                for u in tokens:  # this token's value s * a moves with every token of the row
                    grad[j][u] -= w[j] * adv[j] * s / len(tokens) / count
            elif flows:
                grad[j][t] -= w[j] * adv[j] * rho / count
    return -value / count, grad


def test_sequence_ratio_matches_independent_reference_with_padding_garbage():
    g = torch.Generator().manual_seed(11)
    checked = 0
    for trial in range(30):
        B, T = 2 + trial % 4, 2 + (5 * trial) % 7
        lp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 4
        old = lp + 0.35 * torch.randn(B, T, generator=g, dtype=torch.float64)
        lens = torch.randint(1, T + 1, (B,), generator=g)
        mask = torch.arange(T)[None, :] < lens[:, None]
        garbage = torch.where(torch.rand(B, T, generator=g) < 0.5, 1e4, -1e4).double()
        lp, old = torch.where(mask, lp, garbage), torch.where(mask, old, -garbage)  # padding: finite garbage
        adv = torch.randn(B, generator=g, dtype=torch.float64)
        w = torch.rand(B, generator=g, dtype=torch.float64)
        seq = torch.rand(B, generator=g) < 0.6
        value, grad = _reference_with_sequence_rows(lp.tolist(), old.tolist(), adv.tolist(), w.tolist(),
                                                    mask.tolist(), seq.tolist(), 0.2, 0.28)
        x = lp.clone().requires_grad_(True)
        out, _ = loss.policy_loss(x, old, adv, w, mask, 0.2, 0.28, seq_ratio=seq)
        (gx,) = torch.autograd.grad(out, x)
        assert out.item() == pytest.approx(value, rel=1e-10, abs=1e-12)
        torch.testing.assert_close(gx, torch.tensor(grad, dtype=torch.float64), atol=1e-12, rtol=1e-10)
        checked += int(seq.any() and not seq.all())
    assert checked >= 10  # most trials mix sequence rows and token rows


# ---------------------------------------------------------------- --random-admission (Eq. 11)

def test_random_admission_draws_count_responses_with_capped_weight_and_no_floor():
    s = torch.tensor([1.3, 0.9, 0.5, 0.81, 0.2])
    draws = []
    for seed in range(600):
        w = loss.random_admission_weight(s, 3, seed)
        kept = (w > 0).nonzero().flatten().tolist()
        assert len(kept) == 3
        torch.testing.assert_close(w[kept], s[kept].clamp(max=1.0))  # min(s, 1), the 0.5 and the 0.2 too
        assert torch.equal(w, loss.random_admission_weight(s, 3, seed))  # the seed fixes the draw
        draws.append(tuple(kept))
    assert len(set(draws)) == 10  # every 3 of 5 occurs
    for i in range(5):  # uniform: each response is drawn 3/5 of the time (600 draws: sd 0.02)
        assert abs(sum(i in d for d in draws) / 600 - 0.6) < 0.08
    assert torch.equal(loss.random_admission_weight(s, 0, 1), torch.zeros(5))
    torch.testing.assert_close(loss.random_admission_weight(s, 5, 1), torch.tensor([1.0, 0.9, 0.5, 0.81, 0.2]))


# ---------------------------------------------------------------- optional k3 KL

def test_k3_kl_hand_value_and_zero():
    lp = torch.tensor([[-1.0, -2.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    assert loss.k3_kl(lp, lp.clone(), mask).item() == 0.0
    ref = lp + torch.tensor([[math.log(2.0), 0.0, 100.0]])  # d = ln 2 on token 1, 0 on token 2
    expected = (2.0 - math.log(2.0) - 1.0) / 2
    assert loss.k3_kl(lp, ref, mask).item() == pytest.approx(expected, abs=1e-6)
