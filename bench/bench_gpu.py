"""Where a `--pair small` step spends its time on a GPU, against the card's own ceilings (issue 37; run by
bench/gpu_check.sh, one call):

    python bench/bench_gpu.py --device cuda [--json out.json]
    python bench/bench_gpu.py --toy --device cpu         # narrow shapes, batch 4: every section runs (tests)

1. ceilings   the card's device-to-device copy bandwidth (GB/s) and bf16 matmul rate (TFLOP/s), measured
2. decode     ms per decode step of `generate` at batch 256 and contexts 128 / 512 / 1024, for both architectures
              of --pair small (random weights of their published shapes, bench_small's configs), for each sampler:
                fp32+autocast   before issue 37: the fp32 master weights under bf16 autocast (the K cache is fp32)
                bf16            the bf16 sampling copy (pairs.bf16_copy), transformers' DynamicCache
                bf16+static     the copy with cache_implementation="static" (on CUDA transformers compiles the step)
                bf16+continuous the copy in transformers' continuous batching (generate_batch): ms per token step
              with the K cache's dtype and the attention kernels the profiler saw; a torch.profiler top 10 of one
              decode step of fp32+autocast and of bf16.
3. gap        the sampler-vs-scorer gap on sampled tokens: log-probs of the bf16 copy against those of the training
              forward (fp32 master under autocast), per token: mean and max |difference|, and the share of tokens whose
              ratio exp(scorer - sampler) lies outside the clip range [0.8, 1.28] (what sampler log-probs as pi_old
              would clip at theta = theta_old). On random weights (gap) and on the warm-started tiny pair (tiny_gap).
4. update     response tokens per second of graft_min.update (one minibatch: 64 sequences of 256 prompt and 1024
              response tokens at the small shape) at micro-batch 2 and at the auto size, both architectures.

Each sampler variant and each update measurement runs in its own try: one that fails prints its error and the others
go on; --json is rewritten after every section, so a time-out keeps every figure measured before it.
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import GenerationConfig  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

import bench_small  # noqa: E402
import graft_min  # noqa: E402
import rollout  # noqa: E402
from machinery import memory  # noqa: E402
from machinery import pairs  # noqa: E402
from machinery import settings  # noqa: E402

ARCHS = (("Qwen2.5-0.5B", bench_small.QWEN25_05B), ("SmolLM2-360M", bench_small.SMOLLM2_360M))
SAMPLERS = ("fp32+autocast", "bf16", "bf16+static", "bf16+continuous")


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def ceilings(device, toy):
    """(copy GB/s, bf16 matmul TFLOP/s): the best of 5 repeats each."""
    n, size = (2**20, 256) if toy else (2**29, 8192)  # 1 GiB of bf16 to copy; 8192^3 matmul
    x, y = torch.empty(n, dtype=torch.bfloat16, device=device), torch.empty(n, dtype=torch.bfloat16, device=device)
    a, b = (torch.randn(size, size, dtype=torch.bfloat16, device=device) for _ in range(2))
    best = {"copy": float("inf"), "matmul": float("inf")}
    for _ in range(5):
        for key, fn in (("copy", lambda: y.copy_(x)), ("matmul", lambda: a @ b)):
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            best[key] = min(best[key], time.perf_counter() - t0)
    return 2 * n * 2 / best["copy"] / 1e9, 2 * size**3 / best["matmul"] / 1e12  # read + write bytes


class StepClock(BaseStreamer):
    """generate calls put() once for the prompt and once per new token: the times between puts are decode steps.
    With a profiler, profiler.step() at each put, so that its schedule records whole decode steps."""

    def __init__(self, device, profiler=None):
        self.device, self.profiler, self.times = device, profiler, []

    def put(self, value):
        sync(self.device)
        self.times.append(time.perf_counter())
        if self.profiler is not None:
            self.profiler.step()

    def end(self):
        pass

    def ms_per_step(self):
        steps = [b - a for a, b in zip(self.times[1:], self.times[2:])]  # after the first token (prefill)
        return 1000 * statistics.median(steps)


def prompts(batch, context, vocab, seed=0):
    """Left-padded random prompts of up to `context` tokens (every 8th row 16 tokens shorter, so that the
    attention mask is not None, as in a real batch) -> input_ids, attention_mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, context), generator=g)
    mask = torch.ones(batch, context, dtype=torch.long)
    mask[::8, :min(16, context - 1)] = 0
    return ids.masked_fill(mask == 0, 0), mask


def decode_ms(model, kind, batch, context, new_tokens, device, profiler=None):
    """ms per decode step of one `generate` call (after a warm-up call of the same shape); bf16+continuous: the
    seconds of one generate_batch call over its new tokens."""
    ids, mask = prompts(batch, context, model.config.vocab_size)
    ids, mask = ids.to(device), mask.to(device)
    if kind == "bf16+continuous":
        config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                                  pad_token_id=0)
        rows = [r[m.bool()].tolist() for r, m in zip(ids, mask)]
        model.generate_batch(rows[:8], generation_config=config)  # warm-up
        sync(device)
        t0 = time.perf_counter()
        model.generate_batch(rows, generation_config=config)
        sync(device)
        return 1000 * (time.perf_counter() - t0) / new_tokens
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0,
                              **({"cache_implementation": "static", "max_cache_len": 1024 + 64}
                                 if kind == "bf16+static" else {}))
    with torch.no_grad():  # warm-up: the kernels, and the static cache's compiled step (its length is fixed)
        model.generate(input_ids=ids, attention_mask=mask, streamer=StepClock(device),
                       generation_config=GenerationConfig(**{**config.to_dict(), "max_new_tokens": 3,
                                                             "min_new_tokens": 3}))
        clock = StepClock(device, profiler)
        model.generate(input_ids=ids, attention_mask=mask, generation_config=config, streamer=clock)
    return clock.ms_per_step()


@torch.no_grad()
def cache_dtype(model, device):
    """The dtype generate's KV cache stores keys in, for this model."""
    out = model(input_ids=torch.tensor([[3, 4, 5]], device=device), use_cache=True)
    cache = out.get("cache", None) or out.get("past_key_values")
    return str(cache.layers[0].keys.dtype).replace("torch.", "")


def profile_table(model, batch, context, device):
    """torch.profiler's top 10 (by self device time on CUDA, CPU time on a CPU) of one decode step of generate
    (the 4th put of StepClock to the 5th), and the attention ops it ran."""
    cuda = device.startswith("cuda")
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    schedule = torch.profiler.schedule(wait=2, warmup=1, active=1, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=schedule) as prof:
        decode_ms(model, "bf16", batch, context, 6, device, profiler=prof)
    events = prof.key_averages()
    attention = sorted({e.key for e in events if "attention" in e.key.lower() or "sdp" in e.key.lower()})
    table = events.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=10)
    return table, attention


def gap(master, sampler, tok, prompt_ids, new_tokens, eps=(0.2, 0.28)):
    """Sample from the copy at T 1, score the sampled tokens with both: per token, scorer - sampler log-probs
    (see the module docstring)."""
    torch.manual_seed(0)
    ro = rollout.sample_groups(master, tok, prompt_ids, 1, new_tokens, sampler=sampler)
    with torch.no_grad():
        lp_copy, mask = rollout.token_logprobs(sampler, list(prompt_ids), ro.response_ids, tok.pad_token_id)
    diff = torch.cat(ro.logprobs) - lp_copy[mask].float().cpu()  # [tokens]
    ratio = diff.exp()
    outside = ((ratio < 1 - eps[0]) | (ratio > 1 + eps[1])).float().mean()
    return {"tokens": diff.numel(), "mean_abs": float(diff.abs().mean()), "max_abs": float(diff.abs().max()),
            "mean": float(diff.mean()), "outside_clip_share": float(outside)}


def load_pair(path, device):
    """(fp32 master under bf16 autocast, its bf16 copy, tokenizer), as make_policy sets them up on CUDA."""
    master, tok = pairs.load_policy(path, device, torch.float32)
    copy = pairs.bf16_copy(master)
    pairs.autocast_bf16(master, torch.device(device).type)
    return master, copy, tok


def tiny_gap(device, cache_dir, new_tokens=48, problems=256):
    """gap() on the warm-started tiny pair (trained weights: peaked distributions), held-out prompts."""
    from machinery import tasks, tiny_world
    world = tiny_world.make_world()
    heldout = [p for fam in sorted(world.heldout) for p in world.heldout[fam][:problems // len(world.heldout)]]
    out = {}
    for name, path in zip("ab", tiny_world.tiny_pair(cache_dir)):
        master, copy, tok = load_pair(path, device)
        out[name] = gap(master, copy, tok, [tasks.encode_prompt(tok, p) for p in heldout], new_tokens)
    return out


def update_rate(path, device, micro, toy):
    """Response tokens per second of graft_min.update over one small-shape minibatch at --micro-batch micro."""
    shape = dict(prompt=8, response=16, sequences=8) if toy else dict(prompt=256, response=1024, sequences=64)
    flags = ["--pair", "small", "--device", device, "--minibatches", "1", "--micro-batch", str(micro),
             "--max-new-tokens", str(shape["response"])] + bench_small.TOY_FLAGS[:4] * toy
    cfg = settings.parse_args(flags)
    pol = graft_min.make_policy("a", path, 1e-6, cfg)
    memory.resolve_auto_sizes(cfg, [pol])
    g = torch.Generator().manual_seed(1)
    vocab = pol.model.config.vocab_size
    prompt_ids = [torch.randint(3, vocab, (shape["prompt"],), generator=g).tolist() for _ in range(shape["sequences"])]
    responses = [torch.randint(3, vocab, (shape["response"],), generator=g).tolist() for _ in prompt_ids]
    with torch.no_grad():
        old, mask = rollout.token_logprobs(pol.model, prompt_ids, responses, 0, micro_batch=cfg.micro_batch)
    rows = [graft_min.Row(i // 8, p, r, old[i][mask[i]].float().cpu(), (-1.0) ** i, 1.0, False)
            for i, (p, r) in enumerate(zip(prompt_ids, responses))]
    graft_min.update(pol, rows[:2], cfg, random.Random(0))  # warm-up
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()  # the model, its copy, AdamW: the peak is counted above them
    sync(device)
    t0 = time.perf_counter()
    graft_min.update(pol, rows, cfg, random.Random(0))
    sync(device)
    seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - before) / 2**30 if device.startswith("cuda") else None
    return {"micro_batch": cfg.micro_batch, "tokens_per_s": len(rows) * shape["response"] / seconds,
            "seconds": seconds, "peak_gib": peak}


def decode_rows(result, label, models, kinds, batch, contexts, new_tokens, device):
    """Print (and keep in result) ms per decode step of each sampler kind at each context; a kind that fails
    prints its error and the others go on (a device call must not end on one variant)."""
    print(f"{label}: ms per decode step at batch {batch}\n{'sampler':16s}" +
          "".join(f"{f'ctx {c}':>10s}" for c in contexts) + f"{'tok/s @max':>12s}", flush=True)
    for kind in kinds:
        row = []
        try:
            for c in contexts:
                row.append(decode_ms(models[kind], kind, batch, c, new_tokens, device))
        except Exception as e:  # noqa: BLE001 - printed with its type, then the next variant
            print(f"{kind:16s} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            result.setdefault("decode", {}).setdefault(label, {})[kind] = f"failed: {type(e).__name__}: {e}"
            continue
        result.setdefault("decode", {}).setdefault(label, {})[kind] = dict(zip(map(str, contexts), row))
        print(f"{kind:16s}" + "".join(f"{ms:10.2f}" for ms in row) + f"{batch * 1000 / row[-1]:12.0f}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--toy", action="store_true", help="narrow shapes, batch 4, contexts 8 / 16 (CPU, tests)")
    p.add_argument("--sections", default="ceilings,tiny_gap,decode,gap,update",
                   help="which sections to run, comma-separated (tiny_gap: the gap on the tiny pair)")
    p.add_argument("--samplers", default=",".join(SAMPLERS), help=f"decode variants, comma-separated: {', '.join(SAMPLERS)}")
    p.add_argument("--tokenizers", default=None, help="folder with qwen/ and smollm2/ (default: the fetched models')")
    p.add_argument("--cache-dir", default=None, help="the tiny pair's cache, for the gap on trained weights")
    p.add_argument("--json", default=None, help="also write every figure to this JSON file")
    args = p.parse_args(argv)
    device, toy, sections = args.device, args.toy, args.sections.split(",")
    batch, contexts, new_tokens = (4, (8, 16), 6) if toy else (256, (128, 512, 1024), 32)
    result = {"device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
              "stack": settings.software_stack(device)}

    def save():  # after every section: a time-out of the call keeps what was measured
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    print(f"device: {result['device']}; {json.dumps(result['stack'])}", flush=True)
    if "ceilings" in sections:
        result["copy_gb_s"], result["bf16_tflop_s"] = ceilings(device, toy)
        print(f"ceilings: copy {result['copy_gb_s']:.0f} GB/s, bf16 matmul {result['bf16_tflop_s']:.0f} TFLOP/s",
              flush=True)
        save()
    if "tiny_gap" in sections:
        result["gap_tiny"] = tiny_gap(device, args.cache_dir)
        print(f"tiny pair (trained weights), sampler-vs-scorer gap: {json.dumps(result['gap_tiny'])}", flush=True)
        save()
    kinds = args.samplers.split(",")
    unknown = set(kinds) - set(SAMPLERS)
    if unknown:
        p.error(f"--samplers: unknown {', '.join(sorted(unknown))}; choose from {', '.join(SAMPLERS)}")
    first, extra = [k for k in kinds if k in SAMPLERS[:2]], [k for k in kinds if k not in SAMPLERS[:2]]
    with tempfile.TemporaryDirectory() as tmp:
        built = []
        for (label, config), tok_dir in zip(ARCHS, bench_small.tokenizer_dirs(args.tokenizers)
                                            if {"decode", "gap", "update"} & set(sections) else ()):
            path = os.path.join(tmp, label)
            bench_small.build(config, tok_dir, path, toy, seed=len(label))
            built.append((label, path))
            master, copy, tok = load_pair(path, device)
            if "decode" in sections:
                for kind in ("fp32+autocast", "bf16"):
                    table, ops = profile_table(master if kind == "fp32+autocast" else copy, batch, contexts[-1], device)
                    print(f"\nprofile of one decode step, {label}, {kind}, batch {batch}, context {contexts[-1]}; "
                          f"attention ops: {', '.join(ops) or 'none seen'}\n{table}", flush=True)
                print(f"\n{label}: K cache dtype: fp32+autocast {cache_dtype(master, device)}, bf16 "
                      f"{cache_dtype(copy, device)}", flush=True)
                decode_rows(result, label, {"fp32+autocast": master, "bf16": copy}, first, batch, contexts,
                            new_tokens, device)
                save()
            if "gap" in sections:
                ids, mask = prompts(min(batch, 64), contexts[0], master.config.vocab_size, seed=2)
                g = gap(master, copy, tok, [r[m.bool()].tolist() for r, m in zip(ids, mask)], new_tokens * 4)
                result.setdefault("gap", {})[label] = g
                print(f"\n{label} (random weights), sampler-vs-scorer gap: {json.dumps(g)}", flush=True)
                save()
            del master, copy  # freed now: no reference cycle holds a model (pairs.autocast_bf16)
            if "update" in sections:
                for micro in (2, "auto"):
                    try:
                        r = update_rate(path, device, micro, toy)
                    except Exception as e:  # noqa: BLE001 - printed with its type, then the next measurement
                        print(f"\n{label}: update at micro-batch {micro} failed: {type(e).__name__}: {str(e)[:300]}",
                              flush=True)
                        result.setdefault("update", {}).setdefault(label, []).append(f"failed: {type(e).__name__}: {e}")
                        continue
                    result.setdefault("update", {}).setdefault(label, []).append(r)
                    print(f"\n{label}: update at micro-batch {r['micro_batch']}: {r['tokens_per_s']:.0f} response "
                          f"tokens/s ({r['seconds']:.1f} s" + (f", peak {r['peak_gib']:.1f} GiB above the weights)"
                                                              if r["peak_gib"] else ")"), flush=True)
                    save()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        # the other samplers last: a time-out of the call then cuts these first
        for label, path in built if "decode" in sections and extra else ():
            _, copy, _ = load_pair(path, device)
            decode_rows(result, label, {kind: copy for kind in extra}, extra, batch, contexts, new_tokens, device)
            save()
            del copy
    save()
    return result


if __name__ == "__main__":
    main()
