"""Seconds per training step, GRPO vs GRAFT, on the tiny pair (same seed, same steps).

    python bench/bench_step.py [--steps 10] [--threads 2]

Both methods start from the same warm-started models and run the same prompt batches; the
ratio GRAFT / GRPO is the overhead of exchange (re-tokenising, scoring peer texts, the gate)
plus any extra tokens the replaced groups bring. Also prints the peak resident memory.
"""

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import graft_min  # noqa: E402
from machinery import settings  # noqa: E402
from machinery import tasks  # noqa: E402


def time_method(cfg, method, steps):
    cfg = graft_min.argparse.Namespace(**{**vars(cfg), "method": method})
    paths = settings.model_paths(cfg)
    lr = {"a": cfg.lr_a or cfg.lr, "b": cfg.lr_b or cfg.lr}
    policies = {n: graft_min.make_policy(n, paths[n], lr[n], cfg) for n in "ab"}
    problems, _ = settings.load_data(cfg)
    graft_min.train_step(0, policies, tasks.prompt_batch(problems, cfg.seed, 0, cfg.prompts_per_step), cfg)  # warm-up
    parts, exchanged = {"generate": 0.0, "score": 0.0, "graft": 0.0, "update": 0.0}, 0
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        batch = tasks.prompt_batch(problems, cfg.seed, step, cfg.prompts_per_step)
        metrics, _ = graft_min.train_step(step, policies, batch, cfg)
        for m in metrics.values():
            exchanged += m["selected"]
            for k in parts:
                parts[k] += m["seconds"][k] / steps
    return (time.perf_counter() - t0) / steps, parts, exchanged


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10, help="timed steps per method")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    args, rest = p.parse_known_args()
    torch.set_num_threads(args.threads)
    cfg = settings.parse_args(["--pair", "tiny", *rest])
    results = {m: time_method(cfg, m, args.steps) for m in ("grpo", "graft")}
    print(f"{'method':8s} {'s/step':>8s} {'generate':>9s} {'score':>7s} {'graft':>7s} {'update':>7s} {'groups exchanged':>17s}")
    for m, (sec, parts, ex) in results.items():
        print(f"{m:8s} {sec:8.3f} {parts['generate']:9.3f} {parts['score']:7.3f} {parts['graft']:7.3f} "
              f"{parts['update']:7.3f} {ex:17d}")
    print(f"GRAFT / GRPO time per step: {results['graft'][0] / results['grpo'][0]:.3f} (goal <= 1.25)")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
