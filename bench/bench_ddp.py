"""Seconds per GRAFT step on the tiny pair with 1 and 2 processes (torchrun, gloo on the CPU).

    python bench/bench_ddp.py [--short 2] [--long 6] [--repeats 1] [graft_min flags]

Each row runs the real CLI, `torchrun --standalone --nproc_per_node N graft_min.py --pair tiny --method graft`,
twice: for --short and for --long steps, in fresh run folders. Start-up, model loads and the evaluations at
the start and the end are the same in both, so (wall of the long run - wall of the short one) / (long - short)
is the time of one training step alone. Rows: one process on 1 thread, one process on all threads, and one
process per core on 1 thread each (torchrun's default). The tiny preset's 64 prompts x 8 are split over the
processes. Time it with nothing else heavy running.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wall(nproc, threads, steps, rest, folder):
    out = os.path.join(folder, f"n{nproc}-t{threads}-s{steps}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "graft_min.py",
           "--pair", "tiny", "--method", "graft", "--steps", str(steps), "--eval-every", str(steps),
           "--threads", str(threads), "--out", out, *rest]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    if proc.returncode != 0:
        raise SystemExit(f"bench_ddp: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--short", type=int, default=2, help="steps of the short run")
    p.add_argument("--long", type=int, default=6, help="steps of the long run")
    p.add_argument("--repeats", type=int, default=1, help="pairs of runs per row (the median is printed)")
    args, rest = p.parse_known_args()
    cores = os.cpu_count() or 1
    rows = [(1, 1), (1, cores), (cores, 1)]
    print(f"tiny pair, GRAFT, {args.long - args.short} steps timed as the difference of a {args.long}- and a "
          f"{args.short}-step run; {cores} cores")
    print(f"{'processes':>9s} {'threads each':>12s} {'s/step':>7s} {'speed-up':>8s}  all s/step")
    base = None
    with tempfile.TemporaryDirectory() as folder:
        for nproc, threads in rows:
            per_step = sorted((wall(nproc, threads, args.long, rest, folder) - wall(nproc, threads, args.short, rest,
                                                                                     folder)) / (args.long - args.short)
                              for _ in range(args.repeats))
            mid = per_step[len(per_step) // 2]
            base = base or mid
            print(f"{nproc:9d} {threads:12d} {mid:7.2f} {base / mid:8.2f}  {' '.join(f'{x:.2f}' for x in per_step)}",
                  flush=True)
            for name in os.listdir(folder):  # fresh folders for the next row
                subprocess.run(["rm", "-rf", os.path.join(folder, name)], check=True)


if __name__ == "__main__":
    main()
