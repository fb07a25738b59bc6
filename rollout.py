"""
Rollouts: sampling groups of responses, scoring token log-probs, and re-tokenising a peer's
responses for a receiver (paper Sec. 3 and 4.2).

    sample_groups   n responses per prompt from batched HF `generate` (left-padded prompts), sampled
                    from the policy itself: temperature T, top_p 1, top_k 0, nothing of the model's
                    generation_config but its end ids
    stop_ids        the tokenizer's EOS plus every end id the model's generation_config lists
    token_logprobs  log pi(o_t | q, o_<t) = log_softmax(logits / T) of given response ids
    retokenize      a peer's response *texts* -> the receiver's ids (Sec. 4.2: transfer is text)
    Rollout         the trajectory record: ids, texts, finished flags, behaviour log-probs

A scored batch is [left pad | prompt | response | right pad]: every response starts in the same
column, so its log-probs are one slice of the logits. Masks come from lengths, never from token
values (pad may equal EOS; EOS stays in the loss mask). Behaviour log-probs are rescored by the
same weights right after sampling (as verl and TRL do; tests check they equal what generate
sampled from): keeping generate's logits would cost [tokens x vocab] memory.
"""

import time
from dataclasses import dataclass, field

import torch
import torch.utils.checkpoint
from tqdm import tqdm
from transformers import GenerationConfig
from transformers.generation.streamers import BaseStreamer


@dataclass
class Rollout:
    """n sampled responses for each of G prompts, flattened prompt-major: row i = (i // n, i % n)."""

    prompt_ids: list  # [G] lists of token ids, one per prompt
    response_ids: list  # [G * n] lists of token ids, the stop id included when finished
    texts: list  # [G * n] decoded responses without their stop id, special tokens skipped
    finished: list  # [G * n] True if the response ended with a stop id (not truncated)
    logprobs: list  # [G * n] 1-D float tensors, behaviour log-probs of response_ids
    n: int
    seconds: dict = field(default_factory=dict)  # wall time of "generate" and "score"
    entropy: list = field(default_factory=list)  # [G * n] 1-D float tensors, next-token entropy at each position

    def mean_logprobs(self):
        """Eq. 6 per response: [G * n] tensor (responses are never empty)."""
        return torch.stack([lp.mean() for lp in self.logprobs])


def progress(items=None, desc=None, delay=5, **kw):
    """A tqdm bar for a long wait: shown after `delay` s, updated at most once a second, gone when
    done; disabled without desc and on ranks other than 0."""
    other_rank = torch.distributed.is_initialized() and torch.distributed.get_rank() != 0
    return tqdm(items, desc=desc, leave=False, delay=delay, mininterval=1, disable=desc is None or other_rank, **kw)


def bar_delay(model):
    """Seconds before a bar of this model's work shows: 0 for 100M parameters or more (its prefill
    alone may be long), 5 for the tiny pair (docs/decisions.md#progress-bars-for-real-models)."""
    return 0 if sum(p.numel() for p in model.parameters()) >= 100_000_000 else 5


class TokenBar(BaseStreamer):
    """Moves a bar by one for each new token `generate` samples (it passes the prompt first, then each step)."""

    def __init__(self, bar):
        self.bar, self.prompt_seen = bar, False

    def put(self, value):
        if self.prompt_seen:
            self.bar.update(1)
        self.prompt_seen = True

    def end(self):
        pass


def pad_batch(prompt_ids, response_ids, pad_id):
    """Left-pad prompts, right-pad responses -> input_ids, attention_mask, position_ids [B, L],
    response mask [B, R], and the column P where every response starts."""
    P = max(len(p) for p in prompt_ids)
    R = max(len(r) for r in response_ids)
    B = len(prompt_ids)
    input_ids = torch.full((B, P + R), pad_id, dtype=torch.long)  # [B, L]
    attention = torch.zeros((B, P + R), dtype=torch.long)  # [B, L]
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        input_ids[i, P - len(p):P + len(r)] = torch.tensor(list(p) + list(r), dtype=torch.long)
        attention[i, P - len(p):P + len(r)] = 1
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)  # [B, L], 0 at the first real token
    response_mask = attention[:, P:].bool()  # [B, R]
    return input_ids, attention, position_ids, response_mask, P


# Past this many elements of a micro-batch's [B, R, V] logits, log-probs are taken in chunks of positions
# (chunked_logprobs); 2**26 fp32 elements are 256 MiB a copy. The tiny pair never reaches it, so its numbers
# stay bit for bit (docs/decisions.md#log-prob-chunks).
CHUNK_ELEMENTS = 2**26


def autocast_of(model):
    """The autocast context of the model's own forward (its `autocast_dtype`, set by
    pairs.autocast_bf16), for the parts that chunked_logprobs calls one by one."""
    dtype = getattr(model, "autocast_dtype", None)
    device_type = next(model.parameters()).device.type
    return torch.autocast(device_type, dtype=dtype, enabled=dtype is not None)


def chunked_logprobs(model, input_ids, attention, position_ids, targets, temperature, entropy):
    """token_logprobs past CHUNK_ELEMENTS: same numbers, and [B, R, V] logits never exist whole.

    The trunk runs once; lm-head, log_softmax and gather run per chunk of positions, recomputed in
    the backward. targets [B, R] -> (logprobs [B, R], and entropies [B, R] if entropy)."""
    B, R = targets.shape
    head = model.get_output_embeddings()
    cap = getattr(model.config, "final_logit_softcapping", None)  # Gemma 2's; applied as its forward does

    def piece(h, t):  # h [B, c, H] final hidden states, t [B, c] targets -> log-probs [B, c] (and entropies [B, c])
        with autocast_of(model):
            logits = head(h)  # [B, c, V]
            if cap is not None:
                logits = torch.tanh(logits / cap) * cap
        logits = logits.float()
        if temperature != 1:
            logits = logits / temperature
        all_logprobs = torch.log_softmax(logits, dim=-1)  # [B, c, V]
        lp = all_logprobs.gather(-1, t[..., None]).squeeze(-1)  # [B, c]
        return (lp, -(all_logprobs.exp() * all_logprobs).sum(-1)) if entropy else (lp,)

    with autocast_of(model):
        hidden = model.base_model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                                  use_cache=False).last_hidden_state[:, -R - 1:-1]  # [B, R, H], position t predicts t+1
    step = max(1, CHUNK_ELEMENTS // (B * head.weight.shape[0]))  # response positions per chunk
    parts = []
    for i in range(0, R, step):
        h, t = hidden[:, i:i + step], targets[:, i:i + step]
        parts.append(torch.utils.checkpoint.checkpoint(piece, h, t, use_reentrant=False) if torch.is_grad_enabled()
                     else piece(h, t))
    return tuple(torch.cat([part[k] for part in parts], dim=1) for k in range(len(parts[0])))  # [B, R] each


def token_logprobs(model, prompt_ids, response_ids, pad_id, temperature=1.0, micro_batch=None, entropy=False,
                   desc=None):
    """log_softmax(logits / T) of each response token given its prompt and the tokens before it.

    prompt_ids, response_ids: B id lists each -> (logprobs [B, R], mask [B, R]), plus the next-token
    entropy [B, R] if entropy; gradients flow in grad mode. micro_batch bounds rows per forward
    (desc: a bar over them); past CHUNK_ELEMENTS it chunks.
    """
    device = next(model.parameters()).device
    if micro_batch and len(prompt_ids) > micro_batch:
        parts = [token_logprobs(model, prompt_ids[i:i + micro_batch], response_ids[i:i + micro_batch],
                                pad_id, temperature, entropy=entropy)
                 for i in progress(range(0, len(prompt_ids), micro_batch), desc, bar_delay(model), unit="micro-batch")]
        R = max(part[0].shape[1] for part in parts)
        return tuple(torch.cat([torch.nn.functional.pad(part[k], (0, R - part[k].shape[1])) for part in parts])
                     for k in range(len(parts[0])))
    input_ids, attention, position_ids, mask, P = pad_batch(prompt_ids, response_ids, pad_id)
    B, R = mask.shape
    targets = input_ids[:, P:].to(device)  # [B, R]
    if B * R * model.get_output_embeddings().weight.shape[0] > CHUNK_ELEMENTS:
        out = chunked_logprobs(model, input_ids.to(device), attention.to(device), position_ids.to(device), targets,
                               temperature, entropy)
        return out[0], mask.to(device), *out[1:]
    # Without gradients only the last R + 1 positions reach the lm-head (same log-probs, bit for bit); with
    # gradients all do: fewer rows would round its weight gradient differently
    # (docs/decisions.md#scoring-keeps-only-the-response-logits).
    keep = {} if torch.is_grad_enabled() else {"logits_to_keep": R + 1}
    out = model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                position_ids=position_ids.to(device), use_cache=False, **keep)
    logits = out.logits[:, -R - 1:-1].float()  # [B, R, V], logits at t predict t+1 (responses end the rows)
    if temperature != 1:  # x / 1 == x: no [B, R, V] copy at T = 1
        logits = logits / temperature
    all_logprobs = torch.log_softmax(logits, dim=-1)  # [B, R, V]
    logprobs = all_logprobs.gather(-1, targets[..., None]).squeeze(-1)  # [B, R]
    if entropy:
        return logprobs, mask.to(device), -(all_logprobs.exp() * all_logprobs).sum(-1)  # [B, R] each
    return logprobs, mask.to(device)


def stop_ids(model, tokenizer):
    """Sorted ids that end a response: the tokenizer's EOS and each end id of the model's
    generation_config (chat models often list several)."""
    listed = model.generation_config.eos_token_id
    listed = [] if listed is None else [listed] if isinstance(listed, int) else list(listed)
    return sorted({tokenizer.eos_token_id, *listed})


def response_length(ids, stop):
    """(tokens up to and including the first stop id, True); (all of them, False) if there is none
    (truncated). stop: one id or a collection of ids."""
    stop = {stop} if isinstance(stop, int) else set(stop)
    for t, tok in enumerate(ids):
        if tok in stop:
            return t + 1, True
    return len(ids), False


@torch.no_grad()
def sample_groups(model, tokenizer, prompt_ids, n, max_new_tokens, temperature=1.0, top_p=1.0,
                  gen_batch=None, score=True, score_batch=None, desc=None, sampler=None):
    """n responses for each of G prompts (id lists), scored by `model` -> Rollout.

    sampler (e.g. a bf16 copy) samples instead of `model`, which still scores, so rho = 1 before the
    first update. top_p < 1 is for evaluation only: training samples exactly softmax(logits / T).
    score=False skips the log-probs; gen_batch / score_batch bound sequences per generate / scoring
    call; desc names the bars.
    """
    t0 = time.time()
    gen = model if sampler is None else sampler
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id
    if tokenizer.eos_token_id is None or pad_id is None:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} needs eos_token_id and pad_token_id set")
    flat = [p for p in prompt_ids for _ in range(n)]  # [G * n] prompt-major
    step = gen_batch or len(flat)
    response_ids, finished = [], []
    stop = stop_ids(gen, tokenizer)  # read before the config is blanked
    # The model's own generation_config (hub defaults such as top_k=20 or a repetition
    # penalty) must not change the sampling distribution: generate from a blank config.
    saved_config, gen.generation_config = gen.generation_config, GenerationConfig()
    # Every module samples in eval mode, checkpointed layers too: in training mode generate may drop the KV
    # cache (docs/decisions.md#sampling-in-eval-mode).
    modes = [(m, m.training) for m in gen.modules()]
    gen.eval()
    chunks, delay = range(0, len(flat), step), bar_delay(model)
    bar = progress(desc=desc and f"{desc}: sampling", delay=delay, total=len(chunks) * max_new_tokens, unit="token")
    try:
        for start in chunks:
            chunk = flat[start:start + step]
            P = max(len(p) for p in chunk)
            input_ids = torch.tensor([[pad_id] * (P - len(p)) + list(p) for p in chunk], device=device)
            attention = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in chunk], device=device)
            out = gen.generate(input_ids=input_ids, attention_mask=attention, do_sample=True,
                               temperature=temperature, top_p=top_p, top_k=0,
                               max_new_tokens=max_new_tokens, eos_token_id=stop, pad_token_id=pad_id,
                               streamer=TokenBar(bar))
            bar.update(max_new_tokens - (out.shape[1] - P))  # the steps not taken: every response had stopped
            for row in out[:, P:].tolist():  # cut at the first stop id: what follows is padding
                length, done = response_length(row, stop)
                response_ids.append(row[:length])
                finished.append(done)
    finally:
        bar.close()
        gen.generation_config = saved_config
        for m, mode in modes:
            m.training = mode
    bodies = [ids[:-1] if done else ids for ids, done in zip(response_ids, finished)]  # the text before the stop id
    texts = tokenizer.batch_decode(bodies, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    t1 = time.time()
    logprobs, entropy = [], []
    for start in progress(chunks, desc and f"{desc}: scoring", delay, unit="chunk") if score else []:
        lp, mask, ent = token_logprobs(model, flat[start:start + step], response_ids[start:start + step], pad_id,
                                       temperature, micro_batch=score_batch, entropy=True,
                                       desc=desc and f"{desc}: scoring")
        logprobs += [row[m].float().cpu() for row, m in zip(lp, mask)]
        entropy += [row[m].float().cpu() for row, m in zip(ent, mask)]
    seconds = {"generate": t1 - t0, "score": time.time() - t1}
    return Rollout(list(prompt_ids), response_ids, texts, finished, logprobs, n, seconds, entropy)


def retokenize(texts, finished, tokenizer):
    """A peer's response strings -> the receiver's response ids (its EOS appended if finished)."""
    out = []
    for text, done in zip(texts, finished):
        ids = tokenizer.encode(text, add_special_tokens=False)
        out.append(ids + [tokenizer.eos_token_id] if done else ids)
    return out
