"""
What a run needs on its device: the memory estimate logged at start, and `--gen-batch auto` / `--micro-batch auto`
(the largest batch sizes that fit the free memory; the `small` and paper presets' default).

No equation of the paper lives here: this is bookkeeping in bytes, so that one GPU runs the method at its own
sizes. The estimate is deliberately on the safe side (prompts of 512 tokens, the attention's math path,
fp32 activations); bench/gpu_check.sh holds it against the card's measured peak.

    memory_estimate / describe_memory   one model's weights, gradients and AdamW states (16 bytes a parameter)
    sampling_bytes                      one sequence of generate: KV cache, one layer's prefill, the step's logits
    update_bytes                        one sequence of the update: checkpointed layer inputs, one layer's
                                        recompute, attention scores; without checkpointing every layer's activations
    auto_batch_sizes                    both sizes from the free bytes, for the models of a run
"""

import logging
import math
import os

import torch

import rollout

log = logging.getLogger("graft_min")
GiB = 2**30
PROMPT_TOKENS = 512  # the prompt length every estimate assumes (GSM8K / MATH prompts with a chat template: ~100-300)


def memory_estimate(model, cfg):
    """GB one model needs on its device, logged at start. 16 bytes per parameter: fp32 weights (4),
    gradients (4), AdamW's two moments (8). Plus the update's vocabulary-wide tensors of one
    micro-batch (logits in fp32, divided by T, log_softmax: 3 copies of [B, T, V] x 4 bytes),
    prompts of at most 512 tokens assumed, and bounded by rollout's chunks of positions. "params" is in
    billions; an `auto` micro-batch counts as 1 here (auto_batch_sizes sizes it later)."""
    n = sum(p.numel() for p in model.parameters())  # tied embeddings count once
    vocab = model.get_output_embeddings().weight.shape[0]
    minibatch = math.ceil(cfg.prompts_per_step * cfg.n / cfg.minibatches)  # sequences per update
    micro = 1 if cfg.micro_batch == "auto" else min(cfg.micro_batch or minibatch, minibatch)
    gb = {"params": n / 1e9, "weights": 4 * n / 1e9, "grads": 4 * n / 1e9, "adam": 8 * n / 1e9}
    gb["total"] = gb["weights"] + gb["grads"] + gb["adam"]
    elements = micro * (PROMPT_TOKENS + cfg.max_new_tokens) * vocab  # [B, T, V]
    gb["logits"] = 3 * min(elements, rollout.CHUNK_ELEMENTS) * 4 / 1e9
    return gb


def describe_memory(gb):
    """memory_estimate's numbers as one log line."""
    return (f"{gb['params']:.2f}B params; fp32 weights {gb['weights']:.1f} + grads {gb['grads']:.1f} + AdamW states "
            f"{gb['adam']:.1f} = {gb['total']:.1f} GB, + ~{gb['logits']:.1f} GB of fp32 log-probs over the vocabulary "
            f"per micro-batch (activations and KV cache not counted)")


def shape(model):
    """(layers, hidden, intermediate, query heads, KV heads, head dim, vocabulary) from a model's config; GPT-2's
    names map onto these, and its MLP is 4 x hidden when n_inner is unset."""
    c = model.config
    hidden, heads = c.hidden_size, c.num_attention_heads
    inter = getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * hidden
    kv = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    return c.num_hidden_layers, hidden, inter, heads, kv, head_dim, model.get_output_embeddings().weight.shape[0]


def sampling_bytes(model, max_new_tokens, cache_bytes):
    """Bytes one more sequence in a generate call costs: its KV cache over the whole context (cache_bytes 2 for
    a bf16 sampler, 4 for fp32 weights under autocast), plus the larger of the prefill's transients (one layer's
    activations and attention scores over the prompt) and a decode step's (one layer's K and V expanded to every
    query head, as SDPA does with a padding mask, twice for the cache's concatenation; the step's fp32 logits in
    four copies: logits, warped, probabilities, top-p's sort)."""
    layers, hidden, inter, heads, kv, head_dim, vocab = shape(model)
    context = PROMPT_TOKENS + max_new_tokens
    cache = 2 * layers * kv * head_dim * context * cache_bytes
    prefill = PROMPT_TOKENS * (4 * hidden + 3 * inter) * 4 + 2 * heads * PROMPT_TOKENS ** 2 * 4
    decode = 2 * 2 * heads * head_dim * context * cache_bytes + 4 * vocab * 4
    return cache + max(prefill, decode)


def update_bytes(model, max_new_tokens, checkpointing):
    """Bytes one more sequence in an update micro-batch costs (forward kept for the backward, then the backward's
    own): fp32 at every stored activation. With gradient checkpointing each layer keeps its input and one layer at
    a time recomputes its activations (~10 hidden-wide and 3 MLP-wide tensors, attention scores, probabilities and
    their gradient); without it every layer keeps them. Plus the final hidden states and their gradient, and one
    position of fp32 logits (log-probs beyond rollout.CHUNK_ELEMENTS are chunked: auto_batch_sizes adds a chunk)."""
    layers, hidden, inter, heads, kv, head_dim, vocab = shape(model)
    S = PROMPT_TOKENS + max_new_tokens
    layer = S * (10 * hidden + 3 * inter) * 4 + 3 * heads * S * S * 4
    kept = layers * S * hidden * 4 + layer if checkpointing else layers * layer
    return kept + 2 * S * hidden * 4 + 4 * vocab * 4


def free_bytes(device):
    """Bytes free for this process's tensors on `device`: on CUDA the driver's free memory plus what torch's
    allocator holds cached but unused (a previous run's tensors), within the process's cap if one is set
    (torch.cuda.set_per_process_memory_fraction: how a 24 GB card is played on a larger one); on a CPU the
    available RAM."""
    if torch.device(device).type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        allocated = torch.cuda.memory_allocated(device)
        free += torch.cuda.memory_reserved(device) - allocated
        fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda d: 1.0)  # newer torch only
        cap = fraction(device) * total
        return int(min(free, cap - allocated))
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def auto_batch_sizes(models, samplers, cfg, free, world_size=1):
    """(gen_batch, micro_batch, details): `auto` sizes made concrete for a run of `models` (their weights and
    bf16 sampling copies already on the device, so `free` bytes no longer hold them). The budget is `free` less
    what the first update adds (gradients 4 and AdamW states 8 bytes a parameter, every model), less a reserve
    (1 GiB or a tenth, for the allocator's fragmentation and the kernels' workspaces). The models sample and
    update one at a time, so each size is set by the hungriest model. A size that is not `auto` stays as given;
    neither grows past a step's sequences on this rank (gen) or a minibatch (micro)."""
    n_params = sum(p.numel() for m in models for p in m.parameters())
    reserve = max(GiB, free // 10)
    budget = free - 12 * n_params - reserve
    chunk = 4 * rollout.CHUNK_ELEMENTS * 4  # one chunk's logits, log-softmax, their gradient, exp (fp32)
    sequences = cfg.prompts_per_step // world_size * cfg.n  # a step's training rollouts per model on this rank
    minibatch = math.ceil(sequences / cfg.minibatches)
    per_gen = max(sampling_bytes(m, cfg.max_new_tokens, 2 if s is not None else 4) for m, s in zip(models, samplers))
    per_update = max(update_bytes(m, cfg.max_new_tokens, cfg.grad_checkpointing) for m in models)
    if budget < max(per_gen, per_update + chunk):
        raise MemoryError(f"--gen-batch / --micro-batch auto: {free / GiB:.1f} GiB free, but the gradients and AdamW "
                          f"states of {n_params / 1e9:.2f}B parameters ({12 * n_params / GiB:.1f} GiB) and a reserve "
                          f"of {reserve / GiB:.1f} GiB leave no room for one sequence of {cfg.max_new_tokens} new tokens; "
                          f"give a smaller --max-new-tokens, --grad-checkpointing, or a larger device")
    gen = cfg.gen_batch if cfg.gen_batch != "auto" else max(1, min(sequences, budget // per_gen))
    micro = cfg.micro_batch if cfg.micro_batch != "auto" else max(1, min(minibatch, (budget - chunk) // per_update))
    details = {"free_gib": free / GiB, "budget_gib": budget / GiB, "sampling_mib_per_sequence": per_gen / 2**20,
               "update_mib_per_sequence": per_update / 2**20}
    return int(gen), int(micro), details


def resolve_auto_sizes(cfg, policies, world_size=1, free=None):
    """Set cfg.gen_batch / cfg.micro_batch where they are `auto` (auto_batch_sizes on the free memory of
    cfg.device, or `free` bytes), and log the sizes chosen once. Returns cfg."""
    if "auto" not in (cfg.gen_batch, cfg.micro_batch):
        return cfg
    free = free_bytes(cfg.device) if free is None else free
    gen, micro, d = auto_batch_sizes([p.model for p in policies], [p.sampler for p in policies], cfg, free, world_size)
    log.info("auto sizes on %s: --gen-batch %d, --micro-batch %d (%.1f GiB free, %.1f GiB for batches; a sequence "
             "costs ~%.0f MiB to sample, ~%.0f MiB to update)", cfg.device, gen, micro, d["free_gib"], d["budget_gib"],
             d["sampling_mib_per_sequence"], d["update_mib_per_sequence"])
    cfg.gen_batch, cfg.micro_batch = gen, micro
    return cfg
