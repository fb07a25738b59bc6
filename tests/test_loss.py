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


# ---------------------------------------------------------------- optional k3 KL

def test_k3_kl_hand_value_and_zero():
    lp = torch.tensor([[-1.0, -2.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    assert loss.k3_kl(lp, lp.clone(), mask).item() == 0.0
    ref = lp + torch.tensor([[math.log(2.0), 0.0, 100.0]])  # d = ln 2 on token 1, 0 on token 2
    expected = (2.0 - math.log(2.0) - 1.0) / 2
    assert loss.k3_kl(lp, ref, mask).item() == pytest.approx(expected, abs=1e-6)
