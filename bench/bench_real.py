"""Seconds per GRAFT step on a CPU with real models: SmolLM2-135M next to the tiny pair, or the `--pair cpu` pair.

    python bench/bench_real.py [--steps 2] [--threads 1] [graft_min flags, e.g. --prompts-per-step 4]
    python bench/bench_real.py --cpu-pair [--steps 1] [--threads 2] [graft_min flags]

Default: both rows run the tiny pair's preset (n 8 responses of at most 48 tokens, 2 minibatches, fp32) with 4
prompts per step instead of 64, on the tiny world's prompts with the real verifier. Only model A differs: the
warm-started tiny Llama, or SmolLM2-135M-Instruct converted from its PyPI wheel (pairs.ensure_smollm2; no hub).
Model B is the warm-started tiny GPT-2 in both.
--cpu-pair: GRAFT steps of `python graft_min.py --pair cpu` at its preset's sizes (Qwen2.5-Coder-0.5B-
Instruct x SmolLM2-135M-Instruct on GSM8K, pairs.CPU_PAIR), the number docs/real_models.md and the preset state.
The times are the sum over both models; one warm-up step is not timed.
"""

import argparse
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from machinery import pairs  # noqa: E402
from machinery import settings  # noqa: E402
from machinery import tiny_world  # noqa: E402
from bench_step import time_method  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=2, help="timed steps per row")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--cpu-pair", action="store_true", help="time GRAFT steps of the `--pair cpu` preset")
    args, rest = p.parse_known_args()
    torch.set_num_threads(args.threads)
    rows = {}
    if args.cpu_pair:
        cfg = settings.parse_args(["--pair", "cpu", "--threads", str(args.threads), *rest])
        rows["Qwen-Coder + SmolLM2"] = time_method(cfg, "graft", args.steps)
    else:
        tiny_a, tiny_b = tiny_world.tiny_pair()
        real = pairs.ensure_smollm2()
        for name, model_a in (("tiny A (0.36M) + tiny B", tiny_a), ("SmolLM2-135M + tiny B", real)):
            cfg = settings.parse_args(["--pair", "tiny", "--method", "graft", "--prompts-per-step", "4", *rest,
                                        "--model-a", model_a, "--model-b", tiny_b])
            rows[name] = time_method(cfg, "graft", args.steps)
    print(f"{cfg.prompts_per_step} prompts x {cfg.n} responses of <= {cfg.max_new_tokens} tokens per step, "
          f"{args.threads} thread(s)")
    print(f"{'pair':26s} {'s/step':>8s} {'generate':>9s} {'score':>7s} {'graft':>7s} {'update':>7s} "
          f"{'groups exchanged':>17s}")
    for name, (sec, parts, exchanged) in rows.items():
        print(f"{name:26s} {sec:8.2f} {parts['generate']:9.2f} {parts['score']:7.2f} {parts['graft']:7.2f} "
              f"{parts['update']:7.2f} {exchanged:17d}")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
