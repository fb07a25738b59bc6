"""The `--pair small` shape, measured: GRAFT steps of its two architectures at their real sizes, on random weights.

    python bench/bench_small.py --device cuda [--steps 2] [--tokenizers DIR] [--memory-gib 22] [graft_min flags]
    python bench/bench_small.py --toy [--steps 1]          # 2 narrow layers, 4 prompts x 4, 8 tokens: CPUs, tests
    python bench/bench_small.py --auto-sizes 24,80,141     # the preset's auto batch sizes on such cards (no device)

Builds Qwen2.5-0.5B-Instruct (Qwen2, 494M parameters) and SmolLM2-360M-Instruct (Llama, 362M) from their published
configs (QWEN25_05B, SMOLLM2_360M below) with random weights, and gives them the real tokenizers: those of the
fetched Qwen2.5-Coder-0.5B-Instruct and SmolLM2-135M-Instruct (`python -m machinery.pairs fetch`; the same vocabularies and
chat templates), or the folders DIR/qwen and DIR/smollm2. Each model is saved and loaded by graft_min.make_policy,
then GRAFT steps run at the `small` preset's shape (settings.PRESETS["small"]: 32 GSM8K prompts x 8 responses of
up to 1024 new tokens, 4 minibatches, bf16 autocast and on CUDA sampling from a bf16 copy, gradient checkpointing,
--gen-batch and --micro-batch auto: memory.auto_batch_sizes, printed; fused AdamW). graft_min's --memory-gib plays a
smaller card on a larger one (memory.cap_memory caps the allocator): the auto sizes then fit the cap.
Random weights never sample an end id early: every response is the full 1024 tokens, the worst case. Random text
never verifies either, so rewards come from a hash of each text (right with probability 1/3): groups mix, GRAFT
exchanges, and scoring peer responses is timed too.
Prints each phase as it finishes (a model's sampling, scoring, update), then per step the seconds of each phase (both
models), tokens per second, peak memory, and the hours of a 100-step run from the last step, without and with the
preset's evaluations (estimated from the step's sampling rate: eval_problems x eval_samples responses of the full
length per model, at steps 0, 10, ..., 100). --json is rewritten after every step, so a time-out keeps what ended.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import graft_min  # noqa: E402
import rollout  # noqa: E402
from machinery import memory  # noqa: E402
from machinery import pairs  # noqa: E402
from machinery import settings  # noqa: E402
from machinery import tasks  # noqa: E402

# the published config.json of each model (hub: Qwen/Qwen2.5-0.5B-Instruct, HuggingFaceTB/SmolLM2-360M-Instruct)
QWEN25_05B = dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=896, intermediate_size=4864,
                  num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                  max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  hidden_act="silu", bos_token_id=151643, eos_token_id=151645, sliding_window=32768,
                  max_window_layers=21, use_sliding_window=False, attention_dropout=0.0)
SMOLLM2_360M = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=960, intermediate_size=2560,
                    num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5, vocab_size=49152,
                    max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                    hidden_act="silu", bos_token_id=1, eos_token_id=2, pad_token_id=2, attention_bias=False,
                    mlp_bias=False)
TOY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
TOY_FLAGS = ["--prompts-per-step", "4", "--n", "4", "--max-new-tokens", "8", "--minibatches", "2"]


def hash_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


def build(config, tokenizer_dir, out, toy, seed):
    """A random-weight model of `config` with the tokenizer of `tokenizer_dir`, saved into `out`."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**{**config, **(TOY if toy else {})}),
                                             dtype=torch.float32)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def tokenizer_dirs(folder=None):
    """The Qwen and SmolLM2 tokenizers' folders: folder/qwen and folder/smollm2, or the fetched models' own."""
    if folder:
        return [os.path.join(folder, name) for name in ("qwen", "smollm2")]
    return [pairs.ensure_model(spec) for spec in (pairs.QWEN_CODER, pairs.SMOLLM2)]


def gsm8k_prompts(args):
    """GSM8K training problems: --train-data, else the fetched file (machinery/pairs.py fetch)."""
    path = args.train_data or tasks.data_files(tasks.ensure_data())["gsm8k_train"]
    return tasks.load_gsm8k(path)


def peak_mib(device):
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def auto_sizes(cards_gib, cfg):
    """The `auto` --gen-batch / --micro-batch (memory.auto_batch_sizes) of the small pair at its published sizes on
    cards of these many GiB, with no weights built (meta device): free = the card less both models' fp32 masters and
    bf16 sampling copies (6 bytes a parameter) and half a GiB of CUDA context. Printed, one line a card."""
    with torch.device("meta"):
        models = [AutoModelForCausalLM.from_config(AutoConfig.for_model(**c)) for c in (QWEN25_05B, SMOLLM2_360M)]
    n = sum(p.numel() for m in models for p in m.parameters())
    print(f"auto sizes of --pair small ({cfg.prompts_per_step} prompts x {cfg.n}, <= {cfg.max_new_tokens} new tokens, "
          f"gradient checkpointing {cfg.grad_checkpointing}), estimated by memory.auto_batch_sizes:")
    for gib in cards_gib:
        gen, micro, d = memory.auto_batch_sizes(models, [True, True], cfg, int(gib * 2**30 - 6 * n - 2**29))
        print(f"  {gib:g} GiB card: --gen-batch {gen}, --micro-batch {micro} ({d['budget_gib']:.1f} GiB for batches; "
              f"a sequence ~{d['sampling_mib_per_sequence']:.0f} MiB to sample, ~{d['update_mib_per_sequence']:.0f} MiB "
              f"to update)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=2, help="GRAFT steps to time (the first includes warm-up)")
    p.add_argument("--toy", action="store_true", help="2 narrow layers, 4 prompts x 4, 8 new tokens (CPU, tests)")
    p.add_argument("--tokenizers", default=None,
                   help="folder with qwen/ and smollm2/ tokenizer folders (default: the fetched models' own)")
    p.add_argument("--json", default=None, help="also write the per-step figures to this JSON file")
    p.add_argument("--auto-sizes", default=None, metavar="GIB,GIB",
                   help="only print the auto batch sizes on cards of these sizes (no model built, no device needed)")
    args, rest = p.parse_known_args(argv)
    cfg = settings.parse_args(["--pair", "small", "--method", "graft", "--data", "gsm8k",
                               *(TOY_FLAGS if args.toy else []), *rest])
    if args.auto_sizes:
        return auto_sizes([float(x) for x in args.auto_sizes.split(",")], cfg)
    args.train_data = cfg.train_data
    toks = tokenizer_dirs(args.tokenizers)
    graft_min.reward = hash_reward
    generated = []  # tokens of every sampled response, counted as rollout.sample_groups returns
    sample = rollout.sample_groups

    def counting(*a, **kw):
        ro = sample(*a, **kw)
        generated.append(sum(len(r) for r in ro.response_ids))
        print(f"  {kw.get('desc')}: sampled {generated[-1]} tokens in {ro.seconds['generate']:.1f} s, scored them in "
              f"{ro.seconds['score']:.1f} s", flush=True)
        return ro
    rollout.sample_groups = counting
    update = graft_min.update

    def timed_update(pol, rows, *a):
        t0 = time.perf_counter()
        st = update(pol, rows, *a)
        print(f"  {pol.name}: updated on {len(rows)} responses ({sum(r.peer for r in rows)} from the peer) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        return st
    graft_min.update = timed_update

    with tempfile.TemporaryDirectory() as tmp:
        sizes, policies = {}, {}
        for name, config, tok, label in (("a", QWEN25_05B, toks[0], "Qwen2.5-0.5B"),
                                         ("b", SMOLLM2_360M, toks[1], "SmolLM2-360M")):
            sizes[label] = build(config, tok, os.path.join(tmp, name), args.toy, seed=ord(name))
            policies[name] = graft_min.make_policy(name, os.path.join(tmp, name), cfg.lr, cfg)
    memory.resolve_auto_sizes(cfg, list(policies.values()))
    problems = gsm8k_prompts(args)
    device = cfg.device
    print(f"device: {torch.cuda.get_device_name() if device.startswith('cuda') else 'cpu'}; "
          f"{', '.join(f'{k} {v / 1e6:.0f}M' for k, v in sizes.items())} parameters{' (toy)' * args.toy}; "
          f"{cfg.prompts_per_step} prompts x {cfg.n} responses of <= {cfg.max_new_tokens} tokens, {cfg.minibatches} "
          f"minibatches, {cfg.dtype}, gradient checkpointing {cfg.grad_checkpointing}, micro-batch {cfg.micro_batch}, "
          f"gen-batch {cfg.gen_batch}, sampling from a bf16 copy {policies['a'].sampler is not None}"
          + (f", memory capped at {cfg.memory_gib:g} GiB" if cfg.memory_gib else ""), flush=True)
    print(f"{'step':>4s} {'s/step':>7s} {'generate':>9s} {'score':>6s} {'graft':>6s} {'update':>7s} {'gen tok':>8s} "
          f"{'gen tok/s':>9s} {'upd tok/s':>9s} {'exchanged':>9s} {'peak MiB':>9s}", flush=True)
    rows = []
    for step in range(args.steps):
        generated.clear()
        t0 = time.perf_counter()
        metrics, _ = graft_min.train_step(step, policies, tasks.prompt_batch(problems, cfg.seed, step, cfg.prompts_per_step),
                                          cfg)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        row = {"step": step, "seconds": time.perf_counter() - t0, "generated_tokens": sum(generated),
               "update_tokens": sum(m["tokens_self"] + m["tokens_peer"] for m in metrics.values()),
               "exchanged": sum(m["selected"] for m in metrics.values()), "peak_mib": peak_mib(device),
               **{k: sum(m["seconds"][k] for m in metrics.values()) for k in ("generate", "score", "graft", "update")}}
        rows.append(row)
        print(f"{step:4d} {row['seconds']:7.1f} {row['generate']:9.1f} {row['score']:6.1f} {row['graft']:6.1f} "
              f"{row['update']:7.1f} {row['generated_tokens']:8d} {row['generated_tokens'] / row['generate']:9.0f} "
              f"{row['update_tokens'] / row['update']:9.0f} {row['exchanged']:9d} {row['peak_mib']:9.0f}", flush=True)
        write_json(args.json, cfg, sizes, rows)
    last = rows[-1]
    evals = 100 // cfg.eval_every + 1  # at step 0 and every eval_every steps
    eval_tokens = 2 * evals * cfg.eval_problems * cfg.eval_samples * cfg.max_new_tokens  # both models, full length
    eval_hours = eval_tokens / (last["generated_tokens"] / last["generate"]) / 3600
    last["hours_100_steps"] = 100 * last["seconds"] / 3600
    last["hours_100_steps_with_evals"] = last["hours_100_steps"] + eval_hours
    print(f"100 steps at the last step's pace: {last['hours_100_steps']:.2f} h of training, "
          f"{last['hours_100_steps_with_evals']:.2f} h with {evals} evaluations of {cfg.eval_problems} problems x "
          f"{cfg.eval_samples} (at the step's sampling rate); every response {cfg.max_new_tokens} tokens long, "
          f"the worst case")
    write_json(args.json, cfg, sizes, rows)
    return rows


def write_json(path, cfg, sizes, rows):
    """The figures so far (after each step, and at the end with the 100-step estimate), if --json names a file."""
    if path:
        with open(path, "w") as f:
            json.dump({"config": {k: v for k, v in vars(cfg).items() if isinstance(v, (int, float, str, bool))},
                       "sizes": sizes, "steps": rows}, f, indent=1)


if __name__ == "__main__":
    main()
