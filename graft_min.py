"""
graft-min: GRAFT (arXiv 2609.37868) co-training of two language models with GRPO, as one loop.

Algorithm 1 of the paper, one step:
  1. one shared prompt batch; each model samples n responses per prompt (rollout.sample_groups)
  2. binary rewards (verifier.reward), success counts k, advantages (Eq. 1, loss.group_advantages)
  3. which groups: select_exchange (Eq. 4 + balancing with ties)                      [below]
  4. what and how: for each receiver, each selected all-fail group is REPLACED by the source's
     whole group with the source's advantages; the receiver re-tokenises the texts, scores them
     with its behaviour policy, and weighs each by w (Eqs. 6-8); responses with s <= delta are
     dropped                                                                             [graft_groups]
  5. the receiver's buffer is split into minibatches, peer-containing ones last; one epoch of
     AdamW on the clipped token-mean objective (Eqs. 9-10, loss.policy_loss)             [update]
Methods: graft (both directions), grpo (same loop, no exchange: the budget-matched baseline; the only
method of a one-model preset, pairs.SOLO: --pair coder), stored (one model learns from a GRPO run's logged
peer groups; balancing off). Ablations of the paper's Table 2: --no-gate, --delta, --no-balance,
--peer-order, --pooled, --success-only, --seq-ratio, --random-prompts, --random-admission.

`python graft_min.py --pair tiny` (method "compare") runs GRPO and GRAFT from the same
warm-start and seed, prints a table and writes summary.json and plots next to the run folders.
Simplifications: HF generate instead of vLLM; the tiny pair trains on a synthetic world instead of MATH
(--pair small and the paper presets use MATH and the five benchmarks). One process, or data parallel
under `torchrun --nproc_per_node N graft_min.py ...` (machinery/ddp.py: the batch split over ranks, Eq. 4 on the
gathered counts, Eq. 10's divisor and gradients summed over ranks).
Below this file, never above it: machinery/settings.py (flags, presets, model paths, data), machinery/runlog.py (the run
folder, the summary and the printed report), machinery/pairs.py / machinery/tiny_world.py (the models), machinery/tasks.py (prompts).
"""

import argparse
import hashlib
import json
import logging
import math
import multiprocessing
import os
import random
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch
from tqdm import tqdm

import loss
import rollout
from verifier import reward
from machinery import ddp, memory, pairs, runlog, settings, tasks
from machinery.pairs import Policy, make_policy  # one model for RL: weights, tokenizer, sampling copy, AdamW

log = logging.getLogger("graft_min")


# ---------------------------------------------------------------- which groups (Eq. 4)

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


# ---------------------------------------------------------------- one model's groups

@dataclass
class Row:
    """One response in a receiver's training buffer."""

    prompt: int  # index in the step's prompt batch
    prompt_ids: list
    response_ids: list
    old_logprobs: torch.Tensor  # [T_j] the RECEIVER's behaviour log-probs (Eq. 9 denominator)
    advantage: float  # own (Eq. 1) or the source's, never re-normalised
    weight: float  # 1 for self responses, Eq. 8 for peer ones
    peer: bool


@dataclass
class Groups:
    """A model's groups on the step's prompts, as the peer sees them: texts, not tokens."""

    texts: list  # [G * n]
    finished: list  # [G * n]
    mean_logprobs: torch.Tensor  # [G * n] the source's stored generation log-probs, Eq. 6
    rewards: torch.Tensor  # [G, n]


def own_rows(ro, q, adv_q):
    """The receiver's own n responses to prompt q, with advantages adv_q [n] and weight 1."""
    n = ro.n
    return [Row(q, ro.prompt_ids[q], ro.response_ids[q * n + i], ro.logprobs[q * n + i], float(adv_q[i]), 1.0, False)
            for i in range(n)]


# ---------------------------------------------------------------- what and how (Eqs. 6-8)

@torch.no_grad()
def graft_groups(recv, recv_ro, src, selected, cfg, step=0):
    """Replace the receiver's selected all-fail groups by the source's groups (Eqs. 6-8).

    Every peer response keeps its source-computed advantage (Eq. 1 over the full source group,
    never re-normalised). The receiver re-tokenises the text after its own prompt and scores it
    with its behaviour policy: Eq. 9's denominator and Eq. 7's first term. Responses with s <= delta
    are dropped, not passed with w = 0 (step seeds --random-admission's draw). Returns (rows, s of every peer response).
    """
    n = recv_ro.n
    src_adv = loss.group_advantages(src.rewards)  # [G, n]
    rows, cand = [], []  # cand: (prompt, response index, advantage) of peer responses
    for q in selected:
        adv = src_adv[q]
        if cfg.pooled:  # ablation: one group of 2n; the receiver's failures stay, negative advantages
            pooled = loss.group_advantages(torch.cat([torch.zeros(n), src.rewards[q]])[None])[0]  # [2n]
            rows += own_rows(recv_ro, q, pooled[:n])
            adv = pooled[n:]
        cand += [(q, i, float(adv[i])) for i in range(n) if not cfg.success_only or src.rewards[q, i] > 0]
    texts = [src.texts[q * n + i] for q, i, _ in cand]
    finished = [src.finished[q * n + i] for q, i, _ in cand]
    resp = rollout.retokenize(texts, finished, recv.tok)
    cand, resp = zip(*[(c, r) for c, r in zip(cand, resp) if r]) if any(resp) else ((), ())  # drop empty texts
    if not cand:
        return rows, []
    prompt_ids = [recv_ro.prompt_ids[q] for q, _, _ in cand]
    lp, mask = rollout.token_logprobs(recv.model, prompt_ids, list(resp), recv.tok.pad_token_id, cfg.temperature,
                                      cfg.micro_batch, desc=f"{recv.name}: scoring peer responses")  # [P, T] pi_old
    recv_mean = loss.mean_logprob(lp, mask).cpu()  # [P] Eq. 6, receiver side
    src_mean = torch.stack([src.mean_logprobs[q * n + i] for q, i, _ in cand])  # [P] Eq. 6, source side
    s = loss.compatibility_score(recv_mean, src_mean)  # [P] Eq. 7
    w = torch.ones_like(s) if cfg.no_gate else loss.compatibility_weight(recv_mean, src_mean, cfg.delta)  # Eq. 8
    if cfg.random_admission:  # ablation, Eq. 11: as many as the gate admits, drawn at random, w = min(s, 1), no floor
        w = loss.random_admission_weight(s, int((w > 0).sum()), seed_for(cfg, step, recv.name, "admission", ddp.rank()))
    for j, (q, i, a) in enumerate(cand):
        if w[j] > 0:
            rows.append(Row(q, prompt_ids[j], resp[j], lp[j][mask[j]].float().cpu(), a, float(w[j]), True))
    return rows, s.tolist()


# ---------------------------------------------------------------- the update (Eqs. 9-10)

def minibatches(rows, k, peer_order, rng, n_prompts=None):
    """Split the buffer by prompt into k minibatches; peer-containing ones last (or first, or
    in shuffled order for the ablation). Our packing: prompts keep their batch order, prompts
    holding peer responses are moved to the end, then the list is cut into k near-equal runs.
    k is at most the number of prompts, or of n_prompts: the most any rank holds under torchrun,
    where every rank cuts its own prompts into the same number of minibatches (some may be empty)."""
    prompts = sorted({r.prompt for r in rows})
    peer = {r.prompt for r in rows if r.peer}
    own, grafted = [q for q in prompts if q not in peer], [q for q in prompts if q in peer]
    order = grafted + own if peer_order == "first" else own + grafted
    k = min(k, len(order) if n_prompts is None else n_prompts)
    cuts = [round(i * len(order) / k) for i in range(k + 1)]
    chunks = [set(order[cuts[i]:cuts[i + 1]]) for i in range(k)]
    if peer_order == "shuffle":
        rng.shuffle(chunks)
    return [[r for r in rows if r.prompt in chunk] for chunk in chunks]


def update(pol, rows, cfg, rng):
    """One epoch over the buffer: per minibatch one AdamW step on loss.policy_loss (-J, Eq. 10).

    The token-mean divisor is the minibatch's token count; micro-batches only bound memory and
    give the same gradient. A non-finite loss or gradient skips that step with a warning.
    Under torchrun minibatch j is the union of every rank's j-th: its token count and gradient are
    summed over ranks before clipping and AdamW (ddp), so every rank takes the same step."""
    st = {"loss": 0.0, "grad_norm": 0.0, "skipped": 0, "clip_self": 0, "tok_self": 0, "clip_peer": 0, "tok_peer": 0}
    most = ddp.maximum(len({r.prompt for r in rows}))  # prompts in the largest rank's buffer
    mbs = minibatches(rows, cfg.minibatches, cfg.peer_order, rng, most) if most else []
    micro_size = cfg.micro_batch or max([1] + [len(mb) for mb in mbs])  # sequences per forward / backward
    bar = rollout.progress(desc=f"{pol.name}: update", delay=rollout.bar_delay(pol.model), unit="micro-batch",
                           total=sum(math.ceil(len(mb) / micro_size) for mb in mbs))
    for j, mb in enumerate(mbs):  # the model stays in eval mode: no dropout, so rho = 1 before the first step
        bar.set_postfix_str(f"minibatch {j + 1}/{len(mbs)}", refresh=False)
        pol.opt.zero_grad(set_to_none=True)
        n_tokens = ddp.total(sum(len(r.response_ids) for r in mb))  # Eq. 10's divisor, the global minibatch
        mb_loss = 0.0
        for i in range(0, len(mb), micro_size):  # none when this rank's part is empty
            micro = mb[i:i + micro_size]
            lp, mask = rollout.token_logprobs(pol.model, [r.prompt_ids for r in micro], [r.response_ids for r in micro],
                                              pol.tok.pad_token_id, cfg.temperature)  # [B, T] with grad
            old = torch.nn.utils.rnn.pad_sequence([r.old_logprobs for r in micro], batch_first=True).to(lp.device)
            adv = torch.tensor([r.advantage for r in micro], device=lp.device)  # [B]
            w = torch.tensor([r.weight for r in micro], device=lp.device)  # [B]
            seq = torch.tensor([cfg.seq_ratio and r.peer for r in micro], device=lp.device)  # [B] --seq-ratio rows
            l, _ = loss.policy_loss(lp, old, adv, w, mask, cfg.eps_low, cfg.eps_high, seq)
            (l * mask.sum() / n_tokens).backward()
            mb_loss += l.item() * mask.sum().item() / n_tokens
            clipped = loss.clipped_token_mask(lp, old, adv, mask, cfg.eps_low, cfg.eps_high, seq).sum(1).cpu()  # [B]
            for r, c in zip(micro, clipped.tolist()):
                kind = "peer" if r.peer else "self"
                st[f"clip_{kind}"] += c
                st[f"tok_{kind}"] += len(r.response_ids)
            bar.update(1)
        ddp.sum_gradients(pol.model.parameters())
        mb_loss = ddp.total(mb_loss)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(pol.model.parameters(), cfg.grad_clip))
        if not (math.isfinite(mb_loss) and math.isfinite(grad_norm)):
            log.warning("model %s: non-finite loss %s or grad norm %s; update skipped", pol.name, mb_loss, grad_norm)
            st["skipped"] += 1
            continue
        pol.opt.step()
        if pol.sampler is not None:  # the bf16 copy that samples follows every step of the master weights
            pairs.refresh_copy(pol.sampler, pol.model)
        st["loss"] += mb_loss / len(mbs)
        st["grad_norm"] += grad_norm / len(mbs)
    bar.close()
    st["minibatches"] = len(mbs)
    st["peer_minibatch_positions"] = [i for i, mb in enumerate(mbs) if any(r.peer for r in mb)]
    return st


def gradient_split(pol, rows, cfg):
    """Diagnostic (--grad-split): the norms of the step's policy gradient at theta = theta_old from
    the positive- and from the negative-advantage responses, and their cosine. At rho = 1 the clip
    is inactive, so the gradient of -J is that of -sum_j w_j a_j sum_t log pi / (buffer tokens).
    Costs one more forward and backward pass over the buffer and one copy of the gradient while it runs (4 bytes a
    parameter, which memory.auto_batch_sizes counts); leaves no gradient behind."""
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


# ---------------------------------------------------------------- one step (Algorithm 1)

def seed_for(cfg, step, name, what="sample", rank=0):
    """Every random draw depends only on (seed, step, model, purpose, rank): runs resume exactly, and a
    model samples the same groups whether or not its peer trains beside it. Rank 0 (or one process)
    draws as it always did; the other ranks of a torchrun draw their own streams."""
    key = f"{cfg.seed}/{step}/{name}/{what}" + (f"/rank{rank}" if rank else "")
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)


def rollout_groups(pol, batch, cfg, step):
    """Steps 1-2 for one model: sample n responses per prompt, reward them."""
    torch.manual_seed(seed_for(cfg, step, pol.name, rank=ddp.rank()))
    prompt_ids = [tasks.encode_prompt(pol.tok, p) for p in batch]
    ro = rollout.sample_groups(pol.model, pol.tok, prompt_ids, cfg.n, cfg.max_new_tokens, cfg.temperature,
                               gen_batch=cfg.gen_batch, score_batch=cfg.micro_batch, desc=pol.name, sampler=pol.sampler)
    return ro, Groups(ro.texts, ro.finished, ro.mean_logprobs(), group_rewards(ro.texts, batch, cfg))


def group_rewards(texts, batch, cfg):
    """Binary rewards [G, n] of texts [G * n] (prompt-major) against the batch's gold answers: the
    paper's last-box rule, or also unboxed answers with --lenient-answers."""
    return torch.tensor([reward(t, batch[j // cfg.n].answer, require_box=not cfg.lenient_answers)
                         for j, t in enumerate(texts)]).view(-1, cfg.n)


def exchange(k, n, balance, start, size, rng=None):
    """Step 3 on this rank: select_exchange once on the whole batch's success counts k {model: [G]} (gathered from
    every rank, so balancing and ties are over the whole batch and every rank finds the same groups); each receiver
    keeps the selected prompts that live here, batch[start:start + size], as local indices: {receiver: [q]}. With
    rng (--random-prompts, App. G): as many prompts per receiver, drawn uniformly from the whole batch instead."""
    sel = dict(zip("ba", select_exchange(k["a"], k["b"], n, balance=balance)))  # {receiver: [q]}
    sel = {recv: sorted(rng.sample(range(len(k["a"])), len(qs))) for recv, qs in sel.items()} if rng else sel
    return {recv: [q - start for q in qs if start <= q < start + size] for recv, qs in sel.items()}


def train_step(step, policies, batch, cfg, stored_peer=None):
    """One GRAFT / GRPO / stored-peer step. policies: {"a": Policy, "b": Policy} (stored: one).
    stored_peer: the partner's logged Groups for this batch (stored mode). Under torchrun each rank
    samples its shard of the batch (ddp.shard). Returns (metrics, Groups) of the whole batch."""
    t0 = time.time()
    part, start = ddp.shard(batch)  # this rank's prompts: batch[start:start + len(part)]
    ros, groups = {}, {}
    for name, pol in policies.items():  # 1-2. rollouts and rewards on the shared batch
        ros[name], groups[name] = rollout_groups(pol, part, cfg, step)
    whole = {name: Groups(**ddp.combine(vars(g))) for name, g in groups.items()}  # the whole batch, batch order
    n = cfg.n
    if stored_peer is not None:  # the partner's logged groups: the whole batch's, and this rank's share
        other, lo, hi = ({"a", "b"} - set(policies)).pop(), start * n, (start + len(part)) * n
        whole[other] = stored_peer
        groups[other] = Groups(stored_peer.texts[lo:hi], stored_peer.finished[lo:hi], stored_peer.mean_logprobs[lo:hi],
                               stored_peer.rewards[start:start + len(part)])
    t_rollout = time.time() - t0
    sends, k = {"a": [], "b": []}, {name: g.rewards.sum(1).long() for name, g in whole.items()}  # k: whole batch
    if cfg.method in ("graft", "stored"):  # 3. which groups (Eq. 4 on the whole batch, balancing off when stored)
        sends = exchange(k, n, cfg.method == "graft" and not cfg.no_balance, start, len(part),
                         random.Random(seed_for(cfg, step, "ab", "random-prompts")) if cfg.random_prompts else None)

    metrics = {}
    for name, pol in policies.items():  # 4-5. each receiver's buffer, then its update
        peer = "b" if name == "a" else "a"
        t1, selected = time.time(), sends[name]  # this rank's prompts whose group the receiver takes
        adv = loss.group_advantages(groups[name].rewards)  # [g, n] Eq. 1
        rows = [r for q in range(len(part)) if q not in selected for r in own_rows(ros[name], q, adv[q])]
        peer_rows, s = graft_groups(pol, ros[name], groups[peer], selected, cfg, step) if selected else ([], [])
        t_graft = time.time() - t1
        for group in pol.opt.param_groups:  # linear warm-up over the first steps (paper: none)
            group["lr"] = pol.lr * min(1.0, (step + 1) / (cfg.warmup_steps + 1))
        split = gradient_split(pol, rows + peer_rows, cfg) if cfg.grad_split else {}
        st = update(pol, rows + peer_rows, cfg, random.Random(seed_for(cfg, step, name, "minibatch-order")))
        mine = [r for r in peer_rows if r.peer]
        x = ddp.combine({  # this rank's part of the step's statistics -> the whole batch's
            "selected": len(selected), "s": s, "w": [r.weight for r in mine],
            "correct": sum(1 for r in mine if r.advantage > 0), "wadv": sum(r.weight * r.advantage for r in mine),
            "entropy": torch.cat(ros[name].entropy), "logprob": torch.cat(ros[name].logprobs),
            **{key: st[key] for key in ("clip_self", "tok_self", "clip_peer", "tok_peer", "peer_minibatch_positions")}})
        all_fail, g = (k[name] == 0), whole[name]
        metrics[name] = {
            "step": step, "model": name, "reward_mean": float(g.rewards.mean()),
            "finished_share": sum(g.finished) / len(g.finished),  # of the sampled responses, within --max-new-tokens
            "all_fail_share": float(all_fail.float().mean()),
            "families": runlog.family_stats(batch, g.rewards),
            # token-means over the model's own sampled responses: next-token entropy at T, sampled log-prob
            "entropy": float(x["entropy"].mean()), "sampled_logprob": float(x["logprob"].mean()),
            **split,
            **(runlog.complementarity_stats(k[name], k[peer], n) if peer in k else {}),  # Fig. 1 (a peer's batch)
            **runlog.exchange_stats(x),
            "loss": st["loss"], "grad_norm": st["grad_norm"], "skipped_updates": st["skipped"],
            "peer_minibatch_positions": sorted(set(x["peer_minibatch_positions"])), "minibatches": st["minibatches"],
            "seconds": {"generate": ros[name].seconds["generate"], "score": ros[name].seconds["score"],
                        "graft": t_graft, "update": time.time() - t1 - t_graft, "rollout_all": t_rollout},
        }
    return metrics, whole


@torch.no_grad()
def evaluate(pol, heldout, cfg, step):
    """Held-out pass@1 per family, averaged over cfg.eval_samples samples (paper: T 0.6, top-p 0.95), their
    mean, and per family under "finished" the share of samples that ended within --max-new-tokens and under
    "pass_finished" pass@1 among those (None if none did): a longer budget or a shorter habit moves the first,
    the arithmetic the second. Under torchrun each rank samples its share of the problems; counts are summed."""
    torch.manual_seed(seed_for(cfg, step, pol.name, "eval", ddp.rank()))
    result, finished, pass_finished = {}, {}, {}
    for fam, problems in sorted(heldout.items()):
        problems, _ = ddp.shard(problems)
        prompt_ids = [tasks.encode_prompt(pol.tok, p) for p in problems]
        ro = rollout.sample_groups(pol.model, pol.tok, prompt_ids, cfg.eval_samples, cfg.max_new_tokens,
                                   cfg.eval_temperature, cfg.eval_top_p, gen_batch=cfg.gen_batch, score=False,
                                   desc=f"eval {pol.name} {fam}", sampler=pol.sampler) if problems else None
        texts, ends = (ro.texts, ro.finished) if ro else ([], [])
        hits = [reward(t, problems[j // cfg.eval_samples].answer, require_box=not cfg.lenient_answers)
                for j, t in enumerate(texts)]
        counts = ddp.combine({"hits": sum(hits), "samples": len(hits), "finished": sum(ends),
                              "finished_hits": sum(h for h, e in zip(hits, ends) if e)})
        result[fam] = counts["hits"] / counts["samples"]
        finished[fam] = counts["finished"] / counts["samples"]
        pass_finished[fam] = counts["finished_hits"] / counts["finished"] if counts["finished"] else None
    result["mean"] = sum(result.values()) / len(result)
    return {**result, "finished": finished, "pass_finished": pass_finished}


# ---------------------------------------------------------------- a run

def stored_groups(peer_log, step, batch, cfg):
    """The partner's logged groups for this step's batch, rewards re-verified (stored mode)."""
    records = runlog.logged_groups(peer_log, step, [p.id for p in batch], cfg)
    texts = [t for r in records for t in r["texts"]]
    return Groups(texts, [f for r in records for f in r["finished"]],
                  torch.tensor([x for r in records for x in r["mean_logprobs"]]), group_rewards(texts, batch, cfg))


def run(cfg, method, out, sizes_from=None):
    """Train with one method into the run folder `out`; returns its summary.

    With --resume and a checkpoint in `out`, the run continues from it if its settings agree with
    out/config.json (runlog.check_resume); --threads defaults to the saved thread count then, and `auto` batch sizes
    are the ones it recorded (else those recorded in the config.json sizes_from names, or measured).
    Under torchrun every rank runs this function and loads the checkpoint; rank 0 alone writes the
    folder and returns the summary (the other ranks return None)."""
    cfg, main = argparse.Namespace(**{**vars(cfg), "method": method}), ddp.is_main()
    memory.release(cfg.device)  # what an earlier run in this process held (compare: GRPO's, before GRAFT's)
    files = {k: os.path.join(out, f"{k}.jsonl") for k in ("metrics", "trajectories", "evals")}
    ckpt_path, ckpt = os.path.join(out, "checkpoint.pt"), None
    resuming = cfg.resume and os.path.exists(ckpt_path)
    saved = runlog.saved_config(out) if resuming else None
    if resuming and not cfg.threads:
        cfg.threads = saved.get("threads")  # pinned: on a CPU, torch's results depend on the thread count
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    config = settings.run_config(cfg, method)
    if resuming:
        runlog.check_world_size(out, saved, config)
        ckpt = runlog.load_checkpoint(ckpt_path)
        runlog.report_changes(out, runlog.check_resume(out, saved, config, ckpt["next_step"]))
        runlog.report_machine(out, saved, config)
    if method == "stored":
        runlog.check_peer_log(config)
        cfg.peer = config["peer"]
    paths = settings.model_paths(cfg)  # the folders; config.json records them portably (recorded_path)
    names = [cfg.train] if method == "stored" else sorted(paths)  # a and b (one, A, for pairs.SOLO)
    lrs = {"a": cfg.lr_a or cfg.lr, "b": cfg.lr_b or cfg.lr}
    policies = {name: make_policy(name, paths[name], lrs[name], cfg) for name in names}
    memory.resolve_auto_sizes(cfg, list(policies.values()), ddp.world_size(),  # --gen-batch / --micro-batch auto
                              sizes_from=os.path.join(out, "config.json") if resuming else sizes_from)
    config["sizes"] = {"gen_batch": cfg.gen_batch, "micro_batch": cfg.micro_batch}
    if main:
        runlog.announce_checkpoints(out, [p.model for p in policies.values()], cfg)
    train_problems, heldout = settings.load_data(cfg, paths)  # without prompts over --max-prompt-tokens
    peer_log = runlog.read_peer_log(cfg.peer_log, cfg.peer) if method == "stored" else None

    start, wall = 0, 0.0
    if ckpt is not None:
        for pol in policies.values():
            pol.load(ckpt)
        start, wall = ckpt["next_step"], ckpt["wall"]
        del ckpt
        for key, path in files.items() if main else ():
            runlog.truncate_jsonl(path, start + 1 if key == "evals" else start)
        log.info("resumed %s at step %d", out, start)
    else:
        if main:
            os.makedirs(out, exist_ok=True)
            for path in files.values():
                open(path, "w").close()
            runlog.write_json(os.path.join(out, "config.json"), config)
        for name, pol in policies.items():
            record = {"step": 0, "model": name, **evaluate(pol, heldout, cfg, 0)}
            if main:
                runlog.append_jsonl(files["evals"], record)

    bar = tqdm(range(start, cfg.steps), desc=f"{method:6s} {out}", initial=start, total=cfg.steps,
               position=getattr(cfg, "bar_position", 0), disable=not main)
    for step in bar:
        t0 = time.time()
        batch = tasks.prompt_batch(train_problems, cfg.seed, step, cfg.prompts_per_step)
        peer = stored_groups(peer_log, step, batch, cfg) if peer_log is not None else None
        metrics, groups = train_step(step, policies, batch, cfg, peer)
        for name in policies if main else ():
            runlog.append_jsonl(files["metrics"], metrics[name])
            runlog.log_groups(files["trajectories"], step, name, batch, groups[name], cfg.n)
        done = step + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            for name, pol in policies.items():
                record = {"step": done, "model": name, **evaluate(pol, heldout, cfg, done)}
                if main:
                    runlog.append_jsonl(files["evals"], record)
        wall += time.time() - t0
        if main and (done % cfg.ckpt_every == 0 or done == cfg.steps):
            runlog.save_checkpoint(ckpt_path, {
                "next_step": done, "wall": wall, "models": {n: p.model.state_dict() for n, p in policies.items()},
                "opts": {n: p.opt.state_dict() for n, p in policies.items()}})
    if not main:
        return None
    summary = runlog.summarize(out, wall)
    runlog.write_json(os.path.join(out, "summary.json"), summary)
    return summary


# ---------------------------------------------------------------- the main job and the CLI

def _run_job(job):
    return run(*job)


def run_parallel(jobs, workers, desc=None):
    """Run (cfg, method, out[, sizes_from]) jobs (see run), `workers` at a time in separate processes (1 = in this one),
    each on one thread unless its --threads says otherwise; desc: a bar over the runs (the drivers')."""
    if workers <= 1 or len(jobs) == 1:
        return [run(*job) for job in rollout.progress(jobs, desc, unit="run")]
    jobs = [(argparse.Namespace(**{**vars(cfg), "bar_position": i % workers, "threads": cfg.threads or 1}), m, out)
            for i, (cfg, m, out) in enumerate(jobs)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(rollout.progress(pool.map(_run_job, jobs), desc, total=len(jobs), unit="run"))


def compare(cfg):
    """The main job: GRPO and GRAFT from the same warm-start, seed and per-model rollout budget
    (the tiny pair's two runs go side by side, one per core, when there are two cores; real models
    one run at a time: one GPU, or a CPU's memory, ~17 GB a run for `--pair cpu`; and under torchrun,
    whose ranks run each method together)."""
    settings.model_paths(cfg)  # warm-start the tiny pair (or fetch the cpu pair) once, before the runs
    methods = ("grpo", "graft")
    side_by_side = cfg.pair == "tiny" and not (cfg.model_a or cfg.model_b) and not cfg.device.startswith("cuda")
    workers = min(2, os.cpu_count() or 1) if side_by_side and ddp.world_size() == 1 else 1
    jobs = [(cfg, m, os.path.join(cfg.out, m)) for m in methods]
    if workers == 1:  # one after the other: GRAFT takes the `auto` batch sizes GRPO measured, so both sample alike
        jobs[1] += (os.path.join(jobs[0][2], "config.json"),)
    results = dict(zip(methods, run_parallel(jobs, workers)))
    if not ddp.is_main():
        return None
    summary = {"config": vars(cfg), "stack": results["grpo"]["stack"], "methods": results}
    runlog.write_json(os.path.join(cfg.out, "summary.json"), summary)
    runlog.print_table(results)
    from machinery import plots
    written = plots.plot_runs([cfg.out])
    print(f"\nrun folders: {os.path.join(cfg.out, 'grpo')}  {os.path.join(cfg.out, 'graft')}")
    print(f"summary: {os.path.join(cfg.out, 'summary.json')}   plots: {', '.join(written)}")
    return summary


def main(argv=None):
    cfg = settings.parse_args(argv)
    cfg.device = ddp.init(cfg.device)  # torchrun: join the process group (this rank's GPU); else nothing
    logging.basicConfig(level=logging.INFO if ddp.is_main() else logging.WARNING,
                        format=f"%(levelname)s %(name)s{f' [rank {ddp.rank()}]' * (ddp.world_size() > 1)}: %(message)s")
    try:
        if ddp.world_size() > 1:  # rank 0 warm-starts the tiny pair (or fetches the cpu pair) alone, first
            if ddp.is_main():
                settings.model_paths(cfg)
            ddp.barrier()
        summary = compare(cfg) if cfg.method == "compare" else run(cfg, cfg.method, cfg.out)
        ddp.barrier()  # every rank done before any leaves the group: gloo aborts a rank whose peer closed first
    except (pairs.ModelNotAvailable, tasks.DataNotAvailable, tasks.BadData, runlog.ConfigMismatch,
            runlog.CheckpointNotWritten) as e:
        raise SystemExit(f"graft_min: {e}") from None
    finally:
        ddp.close()
    if summary is not None and cfg.method != "compare":  # rank 0 (or one process); compare printed its table
        print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
