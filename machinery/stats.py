"""
What a training step records in metrics.jsonl, one line per model: rewards and all-fail shares per family, Fig. 1
on the batch (complementarity_stats), the exchange and clipping (exchange_stats) and, on request, the gradient's
split into positive- and negative-advantage parts (gradient_split). Nothing here changes what a step computes.
"""

import math
import statistics

import torch

import rollout
from machinery import ddp


def family_stats(batch, rewards):
    """Per family of the batch's problems: mean reward and share of all-fail groups (rewards [G, n])."""
    out = {}
    for fam in sorted({p.family for p in batch}):
        idx = [j for j, p in enumerate(batch) if p.family == fam]
        r = rewards[idx]  # [G_fam, n]
        out[fam] = {"reward": float(r.mean()), "all_fail": float((r.sum(1) == 0).float().mean())}
    return out


def complementarity_stats(k_self, k_peer, n):
    """Fig. 1 on one batch: of this model's all-fail prompts (success counts k_self [G]), the share where the peer
    (k_peer [G]) has >= 1 success, the share where its group is mixed (Eq. 4's candidates), and their count."""
    all_fail, mixed = k_self == 0, (k_peer > 0) & (k_peer < n)

    def share(hits):
        return float(hits.sum()) / float(all_fail.sum()) if all_fail.any() else None
    return {"peer_any_success_on_all_fail": share((k_peer > 0) & all_fail),
            "peer_mixed_on_all_fail": share(mixed & all_fail), "candidates_in": int((mixed & all_fail).sum())}


def exchange_stats(x):
    """A receiver's exchange and clipping from the step's totals x: groups selected, s of every peer response,
    w and correctness of the admitted ones, clipped tokens of its own and of peer responses."""
    return {"selected": x["selected"], "peer_responses": len(x["s"]),
            "admitted": len(x["w"]), "admitted_share": len(x["w"]) / len(x["s"]) if x["s"] else None,
            "admitted_correct": x["correct"],
            "w_mean": sum(x["w"]) / len(x["w"]) if x["w"] else None, "s_values": [round(v, 4) for v in x["s"]],
            "weighted_adv_admitted": x["wadv"],
            "clip_self": x["clip_self"] / max(1, x["tok_self"]), "clip_peer": x["clip_peer"] / max(1, x["tok_peer"]),
            "tokens_self": x["tok_self"], "tokens_peer": x["tok_peer"]}


def step_metrics(step, name, batch, k, groups, sampled, selected, peer_rows, s, update, split, seconds):
    """The metrics.jsonl line of receiver `name` after a step. k: {model: [G]} success counts of the whole batch;
    groups: its Groups of the whole batch; sampled: its Rollout on this rank's prompts; selected, peer_rows, s: what
    graft_groups took in; update: graft_min.update's statistics; split: gradient_split's (or {}). Under torchrun the
    rank's counts are combined into the whole batch's first (ddp.combine), so every rank writes the same line."""
    peer = "b" if name == "a" else "a"
    admitted = [r for r in peer_rows if r.peer]  # --pooled adds the receiver's own rows to peer_rows
    x = ddp.combine({
        "selected": len(selected), "s": s, "w": [r.weight for r in admitted],
        "correct": sum(1 for r in admitted if r.advantage > 0), "wadv": sum(r.weight * r.advantage for r in admitted),
        "entropy": torch.cat(sampled.entropy), "logprob": torch.cat(sampled.logprobs),
        **{key: update[key] for key in ("clip_self", "tok_self", "clip_peer", "tok_peer", "peer_minibatch_positions")}})
    return {
        "step": step, "model": name, "reward_mean": float(groups.rewards.mean()),
        "finished_share": sum(groups.finished) / len(groups.finished),  # sampled responses within --max-new-tokens
        "all_fail_share": float((k[name] == 0).float().mean()),
        "families": family_stats(batch, groups.rewards),
        # token-means over the model's own sampled responses: next-token entropy at T, sampled log-prob
        "entropy": float(x["entropy"].mean()), "sampled_logprob": float(x["logprob"].mean()),
        **split,
        **(complementarity_stats(k[name], k[peer], groups.rewards.shape[1]) if peer in k else {}),  # Fig. 1
        **exchange_stats(x),
        "loss": update["loss"], "grad_norm": update["grad_norm"], "skipped_updates": update["skipped"],
        "peer_minibatch_positions": sorted(set(x["peer_minibatch_positions"])), "minibatches": update["minibatches"],
        "seconds": {"generate": sampled.seconds["generate"], "score": sampled.seconds["score"],
                    **{key: seconds[key] for key in ("graft", "update", "rollout_all")}},
    }


def gate_report(name, history, delta, exchanges=3, share=0.05):
    """One line, once, when the gate has admitted (almost) nothing: after receiver `name`'s first `exchanges` steps
    that scored peer responses (history: its metrics lines so far), fewer than `share` of them admitted. Else None."""
    seen = [m for m in history if m["peer_responses"]]
    if len(seen) != exchanges or not history[-1]["peer_responses"]:
        return None
    sent, admitted = sum(m["peer_responses"] for m in seen), sum(m["admitted"] for m in seen)
    if admitted >= share * sent:
        return None
    s = statistics.median(v for m in seen for v in m["s_values"])
    return (f"model {name}: the gate admitted {admitted} of {sent} peer responses over its first {exchanges} exchanges "
            f"(median s {s:.2f}, delta {delta}): GRAFT runs as GRPO here; the pair's texts are too "
            f"unlikely under each other (docs/real_models.md#when-the-gate-stays-shut)")


def gradient_split(pol, rows, cfg):
    """--grad-split: the norms of the step's policy gradient at theta = theta_old from the positive- and from the
    negative-advantage rows, and their cosine. At rho = 1 the clip is inactive, so the gradient of -J is that of
    -sum_j w_j a_j sum_t log pi / (buffer tokens). One more forward and backward pass over the buffer and one copy of
    the gradient (4 bytes a parameter, counted by memory.auto_batch_sizes); leaves no gradient behind."""
    n_tokens, grads = ddp.total(sum(len(r.response_ids) for r in rows)), {}
    for sign, part in (("pos", [r for r in rows if r.advantage > 0]), ("neg", [r for r in rows if r.advantage < 0])):
        pol.model.zero_grad(set_to_none=True)
        step = cfg.micro_batch or max(1, len(part))
        for i in range(0, len(part), step):
            micro = part[i:i + step]
            lp, mask = rollout.token_logprobs(pol.model, [r.prompt_ids for r in micro], [r.response_ids for r in micro],
                                              pol.tok.pad_token_id, cfg.temperature)  # [B, T]
            coef = torch.tensor([r.weight * r.advantage for r in micro], device=lp.device)[:, None]  # [B, 1]
            (-(torch.where(mask, lp, torch.zeros_like(lp)) * coef).sum() / n_tokens).backward()
        ddp.sum_gradients(pol.model.parameters())
        grads[sign] = [p.grad.detach().clone() if sign == "pos" and p.grad is not None else p.grad
                       for p in pol.model.parameters()]  # the positive part copied, the negative one in place
    dot = {key: sum(float((x * y).sum()) for x, y in zip(grads[a], grads[b]) if x is not None and y is not None)
           for key, a, b in (("pp", "pos", "pos"), ("nn", "neg", "neg"), ("pn", "pos", "neg"))}
    pol.model.zero_grad(set_to_none=True)
    pos, neg = math.sqrt(dot["pp"]), math.sqrt(dot["nn"])
    return {"grad_norm_pos": pos, "grad_norm_neg": neg, "grad_norm_total": math.sqrt(max(0.0, pos**2 + neg**2 + 2 *
            dot["pn"])), "grad_cos_pos_neg": dot["pn"] / (pos * neg) if pos > 0 and neg > 0 else None}
