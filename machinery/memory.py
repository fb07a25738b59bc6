"""
What a run needs on its device: the memory estimate logged at start, and `--gen-batch auto` / `--micro-batch auto`
(the largest batch sizes that fit the free memory; the `small` and paper presets' default).

No equation of the paper lives here, only bytes. The estimate errs on the safe side (prompts of 512 tokens, the
attention's math path, fp32 activations); bench/gpu_check.sh holds it against the card's measured peak.

    memory_estimate / describe_memory   one model's weights, gradients and AdamW states (16 bytes a parameter)
    sampling_bytes                      one sequence of generate: KV cache, one layer's prefill, the step's logits
    update_bytes                        one sequence of the update: checkpointed layer inputs, one layer's
                                        recompute, attention scores; without checkpointing every layer's activations
    auto_batch_sizes                    both sizes from the free bytes, for the models of a run
    resolve_auto_sizes                  a run's sizes: measured once at its start, or those a run folder recorded
    free_bytes / cap_memory / release   the only lines that ask the CUDA driver (each tested with the driver's entry
                                        points stubbed, torch's own Python layer real: tests/test_gpu_paths.py)
    software_stack / machine / cpu_id   what else a result depends on: the versions and kernels, the CPU's name
                                        and exact kind (config.json records the first two, settings re-exports them;
                                        tiny_pair/MANIFEST.json records all three for the shipped pair)
"""

import gc
import json
import logging
import math
import os
import platform

import torch

import rollout

log = logging.getLogger("graft_min")
GiB = 2**30
PROMPT_TOKENS = 512  # the prompt length an estimate assumes when not told (--max-prompt-tokens enforces it in a run)


def memory_estimate(model, cfg):
    """GB one model needs on its device, logged at start. 16 bytes per parameter: fp32 weights (4),
    gradients (4), AdamW's two moments (8). Plus the update's vocabulary-wide tensors of one
    micro-batch (logits in fp32, divided by T, log_softmax: 3 copies of [B, T, V] x 4 bytes),
    prompts of at most --max-prompt-tokens, and bounded by rollout's chunks of positions. "params" is in
    billions; an `auto` micro-batch counts as 1 here (auto_batch_sizes sizes it later)."""
    n = sum(p.numel() for p in model.parameters())  # tied embeddings count once
    vocab = model.get_output_embeddings().weight.shape[0]
    minibatch = math.ceil(cfg.prompts_per_step * cfg.n / cfg.minibatches)  # sequences per update
    micro = 1 if cfg.micro_batch == "auto" else min(cfg.micro_batch or minibatch, minibatch)
    gb = {"params": n / 1e9, "weights": 4 * n / 1e9, "grads": 4 * n / 1e9, "adam": 8 * n / 1e9}
    gb["total"] = gb["weights"] + gb["grads"] + gb["adam"]
    elements = micro * (cfg.max_prompt_tokens + cfg.max_new_tokens) * vocab  # [B, T, V]
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


def sampling_bytes(model, max_new_tokens, cache_bytes, prompt_tokens=PROMPT_TOKENS):
    """Bytes one more sequence in a generate call costs: its KV cache over the whole context (cache_bytes 2 for
    a bf16 sampler, 4 for fp32 weights under autocast), plus the larger of the prefill's transients (one layer's
    activations and attention scores over the prompt) and a decode step's (one layer's K and V expanded to every
    query head, as SDPA does with a padding mask, twice for the cache's concatenation; the step's fp32 logits in
    four copies: logits, warped, probabilities, top-p's sort)."""
    layers, hidden, inter, heads, kv, head_dim, vocab = shape(model)
    context = prompt_tokens + max_new_tokens
    cache = 2 * layers * kv * head_dim * context * cache_bytes
    prefill = prompt_tokens * (4 * hidden + 3 * inter) * 4 + 2 * heads * prompt_tokens ** 2 * 4
    decode = 2 * 2 * heads * head_dim * context * cache_bytes + 4 * vocab * 4
    return cache + max(prefill, decode)


def update_bytes(model, max_new_tokens, checkpointing, prompt_tokens=PROMPT_TOKENS):
    """Bytes one more sequence in an update micro-batch costs (forward kept for the backward, then the backward's
    own): fp32 at every stored activation. With gradient checkpointing each layer keeps its input and one layer at
    a time recomputes its activations (~10 hidden-wide and 3 MLP-wide tensors, attention scores, probabilities and
    their gradient); without it every layer keeps them. Plus the final hidden states and their gradient, and one
    position of fp32 logits (log-probs beyond rollout.CHUNK_ELEMENTS are chunked: auto_batch_sizes adds a chunk)."""
    layers, hidden, inter, heads, kv, head_dim, vocab = shape(model)
    S = prompt_tokens + max_new_tokens
    layer = S * (10 * hidden + 3 * inter) * 4 + 3 * heads * S * S * 4
    kept = layers * S * hidden * 4 + layer if checkpointing else layers * layer
    return kept + 2 * S * hidden * 4 + 4 * vocab * 4


def cuda_index(device):
    """The index of a CUDA device: its own, or for "cuda" the current device's. The driver's functions that take a
    device want an index (torch.cuda.get_per_process_memory_fraction("cuda") raises ValueError)."""
    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def free_bytes(device):
    """Bytes free for this process's tensors on `device`: on CUDA the driver's free memory plus what torch's
    allocator holds cached but unused (a previous run's tensors), within the process's cap if one is set
    (cap_memory: how a 24 GB card is played on a larger one); on a CPU the available RAM."""
    if torch.device(device).type != "cuda":
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    index = cuda_index(device)
    free, total = torch.cuda.mem_get_info(index)
    allocated = torch.cuda.memory_allocated(index)
    free += torch.cuda.memory_reserved(index) - allocated
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda i: 1.0)  # 1.0: no such query
    return int(min(free, fraction(index) * total - allocated))


def cap_memory(device, gib):
    """CUDA: cap this process's allocator at `gib` GiB of the card (torch.cuda.set_per_process_memory_fraction); an
    allocation past it raises OutOfMemoryError as a card of that size would. Returns the fraction set."""
    index = cuda_index(device)
    fraction = min(1.0, gib * GiB / torch.cuda.mem_get_info(index)[1])
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    return fraction


def release(device):
    """What a finished run held, freed before the next run in this process (compare: GRPO, then GRAFT). The runs
    leave no reference cycle through a model (tests/test_gpu_paths.py pins it), so the collection is a safety net;
    on CUDA the allocator's cache goes back to the driver, so that other processes and nvidia-smi see it free."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def held_bytes(policies):
    """Bytes the policies' weights and buffers (and their sampling copies) hold on their device now."""
    modules = [m for p in policies for m in (p.model, p.sampler) if m is not None]
    return sum(t.numel() * t.element_size() for m in modules for t in (*m.parameters(), *m.buffers()))


def auto_batch_sizes(models, samplers, cfg, free, world_size=1):
    """(gen_batch, micro_batch, details): `auto` sizes made concrete for a run of `models` (their weights and
    bf16 sampling copies already on the device, so `free` bytes no longer hold them). The budget is `free` less
    what the first update adds (gradients 4 and AdamW states 8 bytes a parameter, every model), less a reserve
    (1 GiB or a tenth, for the allocator's fragmentation and the kernels' workspaces). The models sample and
    update one at a time, so each size is set by the hungriest model. A size that is not `auto` stays as given;
    neither grows past a step's sequences on this rank (gen) or a minibatch (micro)."""
    n_params = sum(p.numel() for m in models for p in m.parameters())
    per_param = 12 + 4 * cfg.grad_split  # grads + AdamW states (+ --grad-split's copy)
    reserve = max(GiB, free // 10)
    budget = free - per_param * n_params - reserve
    chunk = 4 * rollout.CHUNK_ELEMENTS * 4  # one chunk's logits, log-softmax, their gradient, exp (fp32)
    sequences = cfg.prompts_per_step // world_size * cfg.n  # a step's training rollouts per model on this rank
    minibatch = math.ceil(sequences / cfg.minibatches)
    prompt = cfg.max_prompt_tokens
    per_gen = max(sampling_bytes(m, cfg.max_new_tokens, 2 if s is not None else 4, prompt)
                  for m, s in zip(models, samplers))
    per_update = max(update_bytes(m, cfg.max_new_tokens, cfg.grad_checkpointing, prompt) for m in models)
    if budget < max(per_gen, per_update + chunk):
        raise MemoryError(f"--gen-batch / --micro-batch auto: {free / GiB:.1f} GiB free, but the gradients and AdamW "
                          f"states of {n_params / 1e9:.2f}B parameters ({per_param * n_params / GiB:.1f} GiB) and a "
                          f"reserve of {reserve / GiB:.1f} GiB leave no room for one sequence of {prompt} prompt and "
                          f"{cfg.max_new_tokens} new tokens; give a smaller --max-new-tokens, --grad-checkpointing, or "
                          f"a larger device")
    gen = cfg.gen_batch if cfg.gen_batch != "auto" else max(1, min(sequences, budget // per_gen))
    micro = cfg.micro_batch if cfg.micro_batch != "auto" else max(1, min(minibatch, (budget - chunk) // per_update))
    details = {"free_gib": free / GiB, "budget_gib": budget / GiB, "sampling_mib_per_sequence": per_gen / 2**20,
               "update_mib_per_sequence": per_update / 2**20}
    return int(gen), int(micro), details


def resolve_auto_sizes(cfg, policies, world_size=1, free=None, sizes_from=None):
    """Set cfg.gen_batch / cfg.micro_batch where they are `auto`, and log the sizes chosen once. Returns cfg.
    sizes_from: a run folder's config.json whose recorded "sizes" to take (a resumed run's own, so that it samples
    as it did; in compare, GRPO's for GRAFT, so that both sample the same groups), when it has them. Else measured:
    auto_batch_sizes on `free` bytes, or on the device's free memory (free_bytes), within --memory-gib less what
    the models hold already. --memory-gib on CUDA also caps the allocator there (cap_memory). Logs each model's
    memory_estimate first, whatever the sizes."""
    for p in policies:
        log.info("model %s (%s): %s", p.name, type(p.model).__name__, describe_memory(memory_estimate(p.model, cfg)))
    if cfg.memory_gib and torch.device(cfg.device).type == "cuda":
        cap_memory(cfg.device, cfg.memory_gib)
    if "auto" not in (cfg.gen_batch, cfg.micro_batch):
        return cfg
    recorded = None
    if sizes_from and os.path.exists(sizes_from):
        with open(sizes_from) as f:
            recorded = json.load(f).get("sizes")
    if recorded:
        gen, micro = recorded["gen_batch"], recorded["micro_batch"]
        log.info("auto sizes as %s records them: --gen-batch %d, --micro-batch %d", sizes_from, gen, micro)
    else:
        if free is None:
            free = free_bytes(cfg.device)
            if cfg.memory_gib:
                free = min(free, int(cfg.memory_gib * GiB) - held_bytes(policies))
        gen, micro, d = auto_batch_sizes([p.model for p in policies], [p.sampler for p in policies], cfg, free,
                                         world_size)
        log.info("auto sizes on %s: --gen-batch %d, --micro-batch %d (%.1f GiB free, %.1f GiB for batches; a sequence "
                 "costs ~%.0f MiB to sample, ~%.0f MiB to update)", cfg.device, gen, micro, d["free_gib"],
                 d["budget_gib"], d["sampling_mib_per_sequence"], d["update_mib_per_sequence"])
    cfg.gen_batch = gen if cfg.gen_batch == "auto" else cfg.gen_batch
    cfg.micro_batch = micro if cfg.micro_batch == "auto" else cfg.micro_batch
    return cfg


def software_stack(device):
    """What a run's numbers depend on besides its flags: the versions of python, torch, transformers, tokenizers
    and numpy, and the kernels torch picks (the CPU capability, e.g. AVX512 or AVX2; on CUDA also the card's
    name). Two runs of the same flags agree bit for bit only on the same stack (docs/runs.md#across-machines)."""
    import numpy
    import tokenizers
    import transformers

    stack = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
             "tokenizers": tokenizers.__version__, "numpy": numpy.__version__,
             "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if str(device).startswith("cuda"):
        stack["cuda_device"] = torch.cuda.get_device_name(torch.device(device))
    return stack


def machine():
    """The CPU's model name (/proc/cpuinfo; platform.processor() elsewhere), which a run records: a warm-start
    depends on the CPU, not only on its kernels (docs/decisions.md#cpu-names-and-exact-kinds)."""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_id():
    """The CPU's exact kind from /proc/cpuinfo ("AuthenticAMD family 25 model 17 stepping 1"), or "" where there is
    none; tiny_pair/MANIFEST.json records it next to machine(), whose name can be generic ("AMD EPYC" on a cloud
    VM) (docs/decisions.md#cpu-names-and-exact-kinds)."""
    fields = {}
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    if "vendor_id" not in fields:
        return ""
    return " ".join([fields["vendor_id"]] + [f"{k.split()[-1]} {fields[k]}" for k in ("cpu family", "model", "stepping")
                                             if k in fields])
