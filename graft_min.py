"""
GRAFT (arXiv 2609.37868): two language models co-trained with GRPO, each all-fail group replaced by the peer's
mixed group for that prompt. Algorithm 1 is train_step; Eq. 4 select_exchange, the replacement graft_groups, Eqs. 9-10
update. `python graft_min.py --pair tiny` runs the main job (GRPO vs GRAFT); torchrun runs the same loop.
Simplified: HF generate instead of vLLM; the tiny pair trains on a synthetic world instead of MATH.
"""

import argparse
import hashlib
import json
import logging
import math
import random
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

import loss
import rollout
from verifier import reward
from machinery import ddp, memory, pairs, runlog, runner, settings, stats, tasks
from machinery.pairs import Policy, make_policy  # one model for RL: weights, tokenizer, sampling copy, AdamW

log = logging.getLogger("graft_min")


# ---------------------------------------------------------------- which groups (Eq. 4)

def select_exchange(k_a, k_b, n, balance=True):
    """Eq. 4 + balancing. k_a, k_b: success counts [G] in [0, n]. A sends q to B when k_b = 0 and 1 <= k_a < n (and
    symmetrically). Balance: each direction keeps its top m = min(|C_ab|, |C_ba|) by source successes, plus ties;
    m = 0 means no exchange. Returns (a_to_b, b_to_a), sorted prompt indices."""
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

    def share(self, start, size):
        """The groups of prompts start .. start + size - 1 (one rank's share of the batch)."""
        n = self.rewards.shape[1]
        lo, hi = start * n, (start + size) * n
        return Groups(self.texts[lo:hi], self.finished[lo:hi], self.mean_logprobs[lo:hi],
                      self.rewards[start:start + size])


def own_rows(sampled, q, adv_q):
    """The receiver's own n responses to prompt q (sampled: its Rollout), advantages adv_q [n], weight 1."""
    n = sampled.n
    return [Row(prompt=q, prompt_ids=sampled.prompt_ids[q], response_ids=sampled.response_ids[q * n + i],
                old_logprobs=sampled.logprobs[q * n + i], advantage=float(adv_q[i]), weight=1.0, peer=False)
            for i in range(n)]


# ---------------------------------------------------------------- what and how (Eqs. 6-8)

@torch.no_grad()
def graft_groups(recv, recv_sampled, src, selected, cfg, step=0):
    """Replace the receiver's `selected` all-fail groups by the source's Groups `src` (Eqs. 6-8). Peer responses keep
    the source's advantages; the receiver re-tokenises each text (longer than its --max-new-tokens: dropped) and
    scores it with its behaviour policy (Eq. 9's denominator, Eq. 7's first term); s <= delta drops it.
    Returns (rows, s of every scored peer response)."""
    n = recv_sampled.n
    src_adv = loss.group_advantages(src.rewards)  # [G, n] Eq. 1 over the full source groups
    rows, cand = [], []  # cand: (prompt, response index, advantage) of peer responses
    for q in selected:
        adv = src_adv[q]
        if cfg.pooled:  # ablation: one group of 2n; the receiver's failures stay, negative advantages
            pooled = loss.group_advantages(torch.cat([torch.zeros(n), src.rewards[q]])[None])[0]  # [2n]
            rows += own_rows(recv_sampled, q, pooled[:n])
            adv = pooled[n:]
        cand += [(q, i, float(adv[i])) for i in range(n) if not cfg.success_only or src.rewards[q, i] > 0]
    texts = [src.texts[q * n + i] for q, i, _ in cand]
    finished = [src.finished[q * n + i] for q, i, _ in cand]
    retokenized = rollout.retokenize(texts, finished, recv.tok)
    # dropped: a text that re-tokenises to nothing, or past the receiver's own budget (docs/differences.md)
    kept = [(c, r) for c, r in zip(cand, retokenized) if 0 < len(r) <= cfg.max_new_tokens]
    over = sum(len(r) > cfg.max_new_tokens for r in retokenized)
    if over:
        log.info("%s: %d peer response(s) longer than --max-new-tokens %d in its tokens, dropped (step %d)",
                 recv.name, over, cfg.max_new_tokens, step)
    if not kept:
        return rows, []
    cand, resp = [c for c, _ in kept], [r for _, r in kept]
    prompt_ids = [recv_sampled.prompt_ids[q] for q, _, _ in cand]
    lp, mask = rollout.token_logprobs(recv.model, prompt_ids, resp, recv.tok.pad_token_id, cfg.temperature,
                                      cfg.micro_batch, desc=f"{recv.name}: scoring peer responses")  # [P, T] pi_old
    recv_mean = loss.mean_logprob(lp, mask).cpu()  # [P] Eq. 6, receiver side
    src_mean = torch.stack([src.mean_logprobs[q * n + i] for q, i, _ in cand])  # [P] Eq. 6, source side
    s = loss.compatibility_score(recv_mean, src_mean)  # [P] Eq. 7
    w = torch.ones_like(s) if cfg.no_gate else loss.compatibility_weight(recv_mean, src_mean, cfg.delta)  # Eq. 8
    if cfg.random_admission:  # ablation, Eq. 11: as many as the gate admits, drawn at random, w = min(s, 1), no floor
        w = loss.random_admission_weight(s, int((w > 0).sum()), seed_for(cfg, step, recv.name, "admission", ddp.rank()))
    for j, (q, i, a) in enumerate(cand):
        if w[j] > 0:
            rows.append(Row(prompt=q, prompt_ids=prompt_ids[j], response_ids=resp[j],
                            old_logprobs=lp[j][mask[j]].float().cpu(), advantage=a, weight=float(w[j]), peer=True))
    return rows, s.tolist()


# ---------------------------------------------------------------- the update (Eqs. 9-10)

def minibatches(rows, k, peer_order, rng, n_prompts=None):
    """Split the buffer by prompt into k near-equal runs of prompts in batch order, those holding peer responses
    moved last (or first, or shuffled: ablations). k is at most the prompts here, or n_prompts (the most any rank
    holds under torchrun, so every rank cuts the same number of minibatches, some maybe empty)."""
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
    """One epoch over the buffer: per minibatch one AdamW step on -J (Eq. 10, loss.policy_loss), divided by the
    minibatch's token count (summed over ranks, as are gradients). A non-finite loss or gradient skips the step."""
    totals = {"loss": 0.0, "grad_norm": 0.0, "skipped": 0, "clip_self": 0, "tok_self": 0, "clip_peer": 0, "tok_peer": 0}
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
                totals[f"clip_{kind}"] += c
                totals[f"tok_{kind}"] += len(r.response_ids)
            bar.update(1)
        ddp.sum_gradients(pol.model.parameters())
        mb_loss = ddp.total(mb_loss)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(pol.model.parameters(), cfg.grad_clip))
        if not (math.isfinite(mb_loss) and math.isfinite(grad_norm)):
            log.warning("model %s: non-finite loss %s or grad norm %s; update skipped", pol.name, mb_loss, grad_norm)
            totals["skipped"] += 1
            continue
        pol.opt.step()
        if pol.sampler is not None:  # the bf16 copy that samples follows every step of the master weights
            pairs.refresh_copy(pol.sampler, pol.model)
        totals["loss"] += mb_loss / len(mbs)
        totals["grad_norm"] += grad_norm / len(mbs)
    bar.close()
    totals["minibatches"] = len(mbs)
    totals["peer_minibatch_positions"] = [i for i, mb in enumerate(mbs) if any(r.peer for r in mb)]
    return totals


# ---------------------------------------------------------------- one step (Algorithm 1)

def seed_for(cfg, step, name, what="sample", rank=0):
    """The seed of one random draw, from (seed, step, model, purpose, rank) only: runs resume exactly, and a model
    samples the same groups with or without a peer. Rank 0 keeps the one-process stream."""
    key = f"{cfg.seed}/{step}/{name}/{what}" + (f"/rank{rank}" if rank else "")
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)


def rollout_groups(pol, batch, cfg, step):
    """Steps 1-2 for one model: n responses per prompt of batch, and their rewards. Returns (Rollout, Groups)."""
    torch.manual_seed(seed_for(cfg, step, pol.name, rank=ddp.rank()))
    prompt_ids = [tasks.encode_prompt(pol.tok, p) for p in batch]
    sampled = rollout.sample_groups(pol.model, pol.tok, prompt_ids, cfg.n, cfg.max_new_tokens, cfg.temperature,
                                    gen_batch=cfg.gen_batch, score_batch=cfg.micro_batch, desc=pol.name,
                                    sampler=pol.sampler)
    return sampled, Groups(sampled.texts, sampled.finished, sampled.mean_logprobs(),
                           group_rewards(sampled.texts, batch, cfg))


def group_rewards(texts, batch, cfg):
    """Binary rewards [G, n] of texts [G * n] (prompt-major) against the batch's answers: the last-box rule, or
    also unboxed answers with --lenient-answers."""
    return torch.tensor([reward(t, batch[j // cfg.n].answer, require_box=not cfg.lenient_answers)
                         for j, t in enumerate(texts)]).view(-1, cfg.n)


def exchange(k, n, balance, start, size, rng=None):
    """Step 3 on this rank: select_exchange on the whole batch's counts k {model: [G]}, then each receiver's prompts
    among batch[start:start + size], as local indices {receiver: [q]}. rng (--random-prompts, App. G): as many
    prompts per receiver, drawn uniformly from the whole batch instead."""
    sel = dict(zip("ba", select_exchange(k["a"], k["b"], n, balance=balance)))  # {receiver: [q]}
    sel = {recv: sorted(rng.sample(range(len(k["a"])), len(qs))) for recv, qs in sel.items()} if rng else sel
    return {recv: [q - start for q in qs if start <= q < start + size] for recv, qs in sel.items()}


def warm_up(pol, cfg, step):
    """Linear learning-rate warm-up over the first --warmup-steps (paper: none, 0)."""
    for group in pol.opt.param_groups:
        group["lr"] = pol.lr * min(1.0, (step + 1) / (cfg.warmup_steps + 1))


def train_step(step, policies, batch, cfg, stored_peer=None):
    """One step of Algorithm 1. policies: {"a": Policy, "b": Policy}, or one with stored_peer, the partner's logged
    Groups of the batch. Returns ({model: metrics}, {model: Groups of the whole batch})."""
    t0 = time.time()
    local, start = ddp.shard(batch)  # this rank's prompts: batch[start:start + len(local)]
    # 1. each model samples n responses per prompt of the shared batch; binary rewards
    sampled, groups = {}, {}
    for name, pol in policies.items():
        sampled[name], groups[name] = rollout_groups(pol, local, cfg, step)
    batch_groups = {name: Groups(**ddp.combine(vars(g))) for name, g in groups.items()}  # whole batch, batch order
    if stored_peer is not None:  # the partner's logged groups stand in for a live peer
        peer = ({"a", "b"} - set(policies)).pop()
        batch_groups[peer], groups[peer] = stored_peer, stored_peer.share(start, len(local))
    k = {name: g.rewards.sum(1).long() for name, g in batch_groups.items()}  # [G] successes, whole batch
    # 2. advantages inside each group (Eq. 1)
    adv = {name: loss.group_advantages(groups[name].rewards) for name in policies}  # [g, n]
    seconds = {"rollout_all": time.time() - t0}
    # 3. which groups: Eq. 4 with balancing (off when stored), on the whole batch's counts
    sends = {"a": [], "b": []}
    if cfg.method in ("graft", "stored"):
        rng = random.Random(seed_for(cfg, step, "ab", "random-prompts")) if cfg.random_prompts else None
        sends = exchange(k, cfg.n, cfg.method == "graft" and not cfg.no_balance, start, len(local), rng)
    metrics = {}
    for name, pol in policies.items():
        t1, peer, selected = time.time(), "b" if name == "a" else "a", sends[name]
        # 4. the selected all-fail groups replaced by the peer's whole groups, gated and weighted (Eqs. 6-8)
        rows = [r for q in range(len(local)) if q not in selected for r in own_rows(sampled[name], q, adv[name][q])]
        peer_rows, s = graft_groups(pol, sampled[name], groups[peer], selected, cfg, step) if selected else ([], [])
        seconds["graft"] = time.time() - t1
        # 5. one epoch of AdamW on -J, minibatches holding peer responses last (Eqs. 9-10)
        warm_up(pol, cfg, step)
        split = stats.gradient_split(pol, rows + peer_rows, cfg) if cfg.grad_split else {}
        totals = update(pol, rows + peer_rows, cfg, random.Random(seed_for(cfg, step, name, "minibatch-order")))
        seconds["update"] = time.time() - t1 - seconds["graft"]
        metrics[name] = stats.step_metrics(step, name, batch, k, batch_groups[name], sampled[name], selected,
                                           peer_rows, s, totals, split, seconds)
    return metrics, batch_groups


@torch.no_grad()
def evaluate(pol, heldout, cfg, step):
    """Held-out pass@1 per family ({family: [Problem]}), over cfg.eval_samples samples each (paper: T 0.6, top-p
    0.95), their mean, and per family the share of samples finished within --max-new-tokens ("finished") and
    pass@1 among those ("pass_finished", None if none). Under torchrun the ranks share the problems."""
    torch.manual_seed(seed_for(cfg, step, pol.name, "eval", ddp.rank()))
    result, finished, pass_finished = {}, {}, {}
    for fam, problems in sorted(heldout.items()):
        problems, _ = ddp.shard(problems)
        prompt_ids = [tasks.encode_prompt(pol.tok, p) for p in problems]
        sampled = rollout.sample_groups(pol.model, pol.tok, prompt_ids, cfg.eval_samples, cfg.max_new_tokens,
                                        cfg.eval_temperature, cfg.eval_top_p, gen_batch=cfg.gen_batch, score=False,
                                        desc=f"eval {pol.name} {fam}", sampler=pol.sampler) if problems else None
        texts, ends = (sampled.texts, sampled.finished) if sampled else ([], [])
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


def run(cfg, method, out, like=None):
    """Train with `method` into the run folder `out`, or continue it with --resume; returns its summary (None on
    ranks other than 0). like: a run folder of the same start whose `auto` sizes and step-0 evaluation to take."""
    cfg = argparse.Namespace(**{**vars(cfg), "method": method})
    memory.release(cfg.device)  # what an earlier run in this process held (compare: GRPO's, before GRAFT's)
    folder = runner.RunFolder(cfg, method, out)  # a resumed folder's settings checked before any model loads
    paths = settings.model_paths(cfg)
    lrs = {"a": cfg.lr_a or cfg.lr, "b": cfg.lr_b or cfg.lr}
    policies = {name: make_policy(name, paths[name], lrs[name], cfg)
                for name in ([cfg.train] if method == "stored" else sorted(paths))}  # a and b, or one
    folder.size(cfg, policies, like)
    train_problems, heldout = settings.load_data(cfg, paths)
    peer_log = runlog.read_peer_log(cfg.peer_log, cfg.peer) if method == "stored" else None
    start, wall = folder.restore(policies)
    copied = folder.start_evals(like) if start == 0 else {}  # compare: GRPO's, when this run starts where it did
    for name, pol in policies.items() if start == 0 else ():
        folder.log_eval(0, name, copied.get(name) or evaluate(pol, heldout, cfg, 0))
    bar = tqdm(range(start, cfg.steps), desc=f"{method:6s} {out}", initial=start, total=cfg.steps,
               position=getattr(cfg, "bar_position", 0), disable=not folder.main)
    for step in bar:
        t0 = time.time()
        batch = tasks.prompt_batch(train_problems, cfg.seed, step, cfg.prompts_per_step)
        peer = stored_groups(peer_log, step, batch, cfg) if peer_log is not None else None
        metrics, groups = train_step(step, policies, batch, cfg, peer)
        folder.log_step(step, batch, metrics, groups, cfg)
        done = step + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            for name, pol in policies.items():
                folder.log_eval(done, name, evaluate(pol, heldout, cfg, done))
        wall += time.time() - t0
        if done % cfg.ckpt_every == 0 or done == cfg.steps:
            folder.checkpoint(done, wall, policies)
    return folder.finish(wall)


# ---------------------------------------------------------------- the CLI

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
        summary = runner.compare(cfg, run) if cfg.method == "compare" else run(cfg, cfg.method, cfg.out)
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
