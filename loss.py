"""
The loss math of GRAFT, as pure tensor functions (no models, no I/O).

Equation numbers follow the paper (arXiv 2609.37868):

    group_advantages         Eq. 1             a_i = (r_i - mean(r)) / (std(r) + eps), sample std; 0 if all r equal
    mean_logprob             Eq. 6             lbar = (1/|o|) sum_t log pi(o_t | q, o_<t)
    compatibility_score      Eq. 7             s = exp(lbar_receiver_old - lbar_source_old)
    compatibility_weight     Eq. 8             w = 1[s > delta] * min(s, 1)
    random_admission_weight  Eq. 11, App. G    w = min(s, 1) on a count-matched random draw (ablation)
    clipped_token_mask       Eqs. 2, 10        where the min takes its clipped branch (no gradient)
    policy_loss              Eqs. 2, 3, 9, 10  -J: weighted, clipped, token-mean surrogate
    k3_kl                    not in the paper  k3 estimate of KL(pi || pi_ref), optional

B = responses in a minibatch, T = padded response length, G = prompts, n = responses per prompt.
Masks are 1 on response tokens (EOS included), 0 on padding; padded positions may hold any finite
garbage and never change a value or a gradient. Advantages and weights are constants (no gradient).
"""

import torch


def group_advantages(rewards, eps=1e-6):
    """Eq. 1: group-normalised advantages with the sample (Bessel) std.

    rewards [G, n] -> advantages [G, n]. A group whose rewards are all equal (all-fail or
    all-success) gets exactly 0, never NaN.
    """
    r = torch.as_tensor(rewards, dtype=torch.float32)  # [G, n]
    if r.dim() != 2 or r.shape[1] < 2:
        raise ValueError(f"group_advantages needs rewards of shape [G, n] with n >= 2, got {tuple(r.shape)}")
    mean = r.mean(dim=1, keepdim=True)  # [G, 1]
    std = r.std(dim=1, keepdim=True)  # [G, 1], unbiased (divides by n - 1)
    adv = (r - mean) / (std + eps)  # [G, n]
    constant = (r == r[:, :1]).all(dim=1, keepdim=True)  # [G, 1] zero-variance groups
    return torch.where(constant, torch.zeros_like(adv), adv)


def mean_logprob(logprobs, mask):
    """Eq. 6: average token log-likelihood of each response over its masked tokens.

    logprobs [B, T], mask [B, T] -> [B]. Every row needs at least one masked token.
    """
    m = mask.bool()  # [B, T]
    count = m.sum(dim=1)  # [B]
    if (count == 0).any():
        rows = torch.nonzero(count == 0).flatten().tolist()
        raise ValueError(f"mean_logprob: rows {rows} have no masked tokens (empty responses)")
    total = torch.where(m, logprobs, torch.zeros_like(logprobs)).sum(dim=1)  # [B]
    return total / count


def compatibility_score(recv_mean_logprob, src_mean_logprob):
    """Eq. 7: s = exp(lbar(pi_old^recv, o^recv) - lbar(pi_old^src, o^src)), per response [B].

    Each mean is taken under its own model and its own tokenisation of the same text.
    """
    return torch.exp(recv_mean_logprob.detach() - src_mean_logprob.detach())  # [B]


def compatibility_weight(recv_mean_logprob, src_mean_logprob, delta=0.8):
    """Eq. 8: w = 1[s > delta] * min(s, 1), per peer response [B].

    The floor is strict (s == delta is dropped); the cap keeps a peer response from ever
    weighing more than a self-generated one (w = 1).
    """
    s = compatibility_score(recv_mean_logprob, src_mean_logprob)  # [B]
    return torch.where(s > delta, s.clamp(max=1.0), torch.zeros_like(s))


def random_admission_weight(s, count, seed):
    """Eq. 11 (App. G, random admission): w = 1[o in A_rand] * min(s, 1), no floor.

    s [P] -> w [P]; A_rand is `count` responses (as many as Eq. 8 admits) drawn without replacement,
    seeded by `seed`.
    """
    drawn = torch.randperm(len(s), generator=torch.Generator().manual_seed(seed))[:count]  # [count]
    w = torch.zeros_like(s)
    w[drawn] = s[drawn].clamp(max=1.0)
    return w


def _masked_log_ratio(logprobs, old_logprobs, mask, seq_ratio=None):
    """log rho (Eqs. 3, 9) [B, T], 0 on padding so exp never sees garbage; also the bool mask.

    seq_ratio (bool [B]): those rows take log s_j = mean_t log rho_jt on every token (GSPO's
    sequence-level ratio; the "w/o token-level ratio" ablation, App. F)."""
    m = mask.bool()
    diff = torch.where(m, logprobs - old_logprobs, torch.zeros_like(logprobs))
    if seq_ratio is not None:
        seq = diff.sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1)  # [B, 1] log s_j
        diff = torch.where(seq_ratio.bool().to(m.device)[:, None] & m, seq, diff)  # [B, T]
    return diff, m


def clipped_token_mask(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, seq_ratio=None):
    """bool [B, T]: tokens where min(rho*a, clip(rho)*a) is clipped, so they get no gradient.

    That is a > 0 and rho > 1 + eps_high, or a < 0 and rho < 1 - eps_low; a seq_ratio row is
    clipped on all its tokens or none.
    """
    log_ratio, m = _masked_log_ratio(logprobs.detach(), old_logprobs.detach(), mask, seq_ratio)
    ratio = torch.exp(log_ratio)  # [B, T]
    a = advantages.detach()[:, None]  # [B, 1]
    clipped = ((a > 0) & (ratio > 1 + eps_high)) | ((a < 0) & (ratio < 1 - eps_low))
    return clipped & m


def policy_loss(logprobs, old_logprobs, advantages, weights, mask, eps_low=0.2, eps_high=0.28, seq_ratio=None):
    """Eqs. 2, 3, 9, 10: loss = -J for one minibatch.

        J = 1/(sum_j |o_j|) * sum_j w_j * sum_t min(rho_jt a_j, clip(rho_jt, 1-eps_low, 1+eps_high) a_j)

    logprobs [B, T] (current, with grad); old_logprobs [B, T] (the trained model's behaviour policy,
    for self and peer rows); advantages [B]; weights [B] (1 self, Eq. 8 peer); mask [B, T].
    Divisor: the unweighted masked-token count (token-mean); gate-dropped rows are removed by the
    caller, not passed with w = 0. seq_ratio (bool [B], --seq-ratio): those rows use
    s_j = exp(mean_t log rho_jt) for every rho_jt, still token-mean. -> (loss scalar, stats dict of floats)
    """
    log_ratio, m = _masked_log_ratio(logprobs, old_logprobs.detach(), mask, seq_ratio)
    n_tokens = m.sum()
    if n_tokens == 0:
        raise ValueError("policy_loss: the minibatch has no masked tokens")
    ratio = torch.exp(log_ratio)  # [B, T], rho
    a = advantages.detach().to(ratio.dtype)[:, None]  # [B, 1]
    w = weights.detach().to(ratio.dtype)[:, None]  # [B, 1]
    unclipped = ratio * a  # [B, T]
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * a  # [B, T]
    per_token = w * torch.minimum(unclipped, clipped)  # [B, T]
    objective = torch.where(m, per_token, torch.zeros_like(per_token)).sum() / n_tokens
    loss = -objective

    clip = clipped_token_mask(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, seq_ratio)
    with torch.no_grad():
        stats = {
            "n_tokens": int(n_tokens),
            "clip_frac": float(clip.sum() / n_tokens),
            "ratio_mean": float(ratio[m].mean()),
            "ratio_max": float(ratio[m].max()),
        }
    return loss, stats


def k3_kl(logprobs, ref_logprobs, mask):
    """Optional (not in the paper; beta = 0 there): token-mean k3 estimate of KL(pi || pi_ref).

    k3 = exp(ref - logp) - (ref - logp) - 1 >= 0 per token. logprobs, ref_logprobs, mask [B, T].
    """
    m = mask.bool()
    d = torch.where(m, ref_logprobs.detach() - logprobs, torch.zeros_like(logprobs))  # [B, T]
    k3 = torch.exp(d) - d - 1  # [B, T], exactly 0 on padding
    return k3.sum() / m.sum().clamp(min=1)
