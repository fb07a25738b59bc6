"""
Reproduce the paper's analyses in the tiny world, over several seeds, from one warm-start:

    Table 1   GRPO (n), GRPO (2n: twice the rollout budget) and GRAFT, per model and family
    Table 6   stored-peer GRAFT: each model learns from its partner's logged GRPO (n) run
    Table 2   ablations: no gate (w = 1), delta = 0 (no floor), success-only, peer-first
    Table 9   clipped share of self vs peer tokens
    Fig. 1    complementarity, from the GRAFT run of the first seed (plots.py)

    python reproduce.py --seeds 0 1 2            # ~60 min on 2 cores with the defaults
    python reproduce.py --seeds 0 --steps 20     # a quick look

Writes results/tiny_results.md and results/tiny_results.json (mean +- std over seeds of the
final held-out pass@1 per model and family, and deltas vs GRPO (n)) and the plots next to them.
Runs go to runs/reproduce/seed<k>/<variant>/ and are resumed if present (--resume semantics).
Jobs run in parallel, one per core, each single-threaded.
"""

import argparse
import json
import os
import statistics
import sys
import time

import graft_min
import plots
import runlog

# variant -> (method, extra flags, which models it reports)
VARIANTS = {
    "grpo": ("grpo", [], "ab"),
    "grpo_2n": ("grpo", ["--n", "16"], "ab"),
    "graft": ("graft", [], "ab"),
    "stored_a": ("stored", ["--train", "a"], "a"),
    "stored_b": ("stored", ["--train", "b"], "b"),
    "no_gate": ("graft", ["--no-gate"], "ab"),
    "delta_0": ("graft", ["--delta", "0"], "ab"),
    "success_only": ("graft", ["--success-only"], "ab"),
    "peer_first": ("graft", ["--peer-order", "first"], "ab"),
}
LABELS = {"grpo": "GRPO (n)", "grpo_2n": "GRPO (2n)", "graft": "GRAFT", "stored_a": "GRAFT stored peer",
          "stored_b": "GRAFT stored peer", "no_gate": "w/o gate (w = 1)", "delta_0": "w/o floor (delta = 0)",
          "success_only": "success-only", "peer_first": "peer minibatches first"}


def jobs_for(variants, seeds, flags, root):
    """(cfg, method, run folder) per variant and seed; finished runs are resumed, i.e. skipped."""
    jobs = []
    for seed in seeds:
        for variant in variants:
            method, extra, _ = VARIANTS[variant]
            out = os.path.join(root, f"seed{seed}", variant)
            if method == "stored":  # the partner's GRPO (n) log of the same seed
                extra = extra + ["--peer-log", os.path.join(root, f"seed{seed}", "grpo", "trajectories.jsonl")]
            cfg = graft_min.parse_args(["--pair", "tiny", "--seed", str(seed), "--method", method, "--out", out,
                                        "--resume", *flags, *extra])
            jobs.append((cfg, method, out))
    return jobs


def mean_std(xs):
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)


def collect(root, seeds):
    """{variant: {model: {family: [final pass@1 per seed]}}} plus exchange statistics."""
    table = {}
    for variant, (_, _, models) in VARIANTS.items():
        for seed in seeds:
            summary = runlog.read_json(os.path.join(root, f"seed{seed}", variant, "summary.json"))
            for m in models:
                s = summary["models"][m]
                row = table.setdefault(variant, {}).setdefault(m, {})
                for fam, acc in s["end"].items():
                    row.setdefault(fam, []).append(acc)
                for key in ("all_fail_share", "groups_exchanged", "responses_admitted", "clip_self", "clip_peer"):
                    row.setdefault(key, []).append(s[key] or 0.0)
    return table


def write_results(table, seeds, args, out_dir, wall):
    models = ["a", "b"]
    fams = sorted(k for k in table["grpo"]["a"] if k not in ("mean", "all_fail_share", "groups_exchanged",
                                                             "responses_admitted", "clip_self", "clip_peer"))
    lines = [f"# Tiny-pair results ({len(seeds)} seeds: {' '.join(map(str, seeds))}; {args.steps} steps; "
             f"written by `python reproduce.py {' '.join(args.argv)}`)", "",
             "Final held-out pass@1 (T 0.6, top-p 0.95), mean +- std over seeds; in brackets the change vs GRPO (n).",
             ""]
    for m in models:
        lines += [f"## Model {m.upper()}", "",
                  "| variant | " + " | ".join(fams) + " | mean | all-fail share | groups exchanged | clip self % | clip peer % |",
                  "|---|" + "---|" * (len(fams) + 5)]
        base = table["grpo"][m]
        for variant in VARIANTS:
            if m not in table[variant]:
                continue
            row = table[variant][m]
            cells = []
            for fam in fams + ["mean"]:
                mu, sd = mean_std(row[fam])
                d = mu - statistics.mean(base[fam])
                cells.append(f"{mu:.3f} +- {sd:.3f}" + ("" if variant == "grpo" else f" ({d:+.3f})"))
            cells += [f"{statistics.mean(row['all_fail_share']):.3f}", f"{statistics.mean(row['groups_exchanged']):.0f}",
                      f"{100 * statistics.mean(row['clip_self']):.2f}", f"{100 * statistics.mean(row['clip_peer']):.2f}"]
            lines.append(f"| {LABELS[variant]} | " + " | ".join(cells) + " |")
        lines.append("")
    gains = {m: statistics.mean(table["graft"][m]["mean"]) - statistics.mean(table["grpo"][m]["mean"]) for m in models}
    stored = {m: statistics.mean(table[f"stored_{m}"][m]["mean"]) - statistics.mean(table["grpo"][m]["mean"])
              for m in models}
    online, kept = sum(gains.values()) / 2, sum(stored.values()) / 2
    lines += ["## Summary", "",
              f"- GRAFT - GRPO (n), mean over families: A {gains['a']:+.3f}, B {gains['b']:+.3f} (paper: +2.11 points "
              "on average over six model-pair blocks).",
              f"- stored-peer GRAFT - GRPO (n): A {stored['a']:+.3f}, B {stored['b']:+.3f}; "
              + (f"it keeps {kept / online:.0%} of the online gain (paper: 84%)." if online > 0 else
                 "the online gain is not positive, so a kept share is not defined (paper: 84%)."),
              f"- wall time of all runs: {wall / 60:.0f} min", ""]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tiny_results.md.tmp"), "w") as f:
        f.write("\n".join(lines))
    os.replace(os.path.join(out_dir, "tiny_results.md.tmp"), os.path.join(out_dir, "tiny_results.md"))
    runlog.write_json(os.path.join(out_dir, "tiny_results.json"),
                      {"seeds": seeds, "steps": args.steps, "command": "python reproduce.py " + " ".join(args.argv),
                       "table": table, "graft_gain": gains, "stored_gain": stored})
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description="Reproduce the paper's tables in the tiny world.")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: the tiny preset's)")
    p.add_argument("--root", default=os.path.join("runs", "reproduce"), help="where the run folders go")
    p.add_argument("--results", default="results", help="where the tables and plots go")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="runs in parallel")
    args = p.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    flags = ["--steps", str(args.steps)] if args.steps else []
    args.steps = args.steps or graft_min.parse_args(["--pair", "tiny"]).steps
    graft_min.model_paths(graft_min.parse_args(["--pair", "tiny"]))  # warm-start once, before the workers
    t0 = time.time()
    online = [v for v in VARIANTS if VARIANTS[v][0] != "stored"]
    stored = [v for v in VARIANTS if VARIANTS[v][0] == "stored"]
    graft_min.run_parallel(jobs_for(online, args.seeds, flags, args.root), args.jobs)
    graft_min.run_parallel(jobs_for(stored, args.seeds, flags, args.root), args.jobs)  # reads the GRPO logs
    table = collect(args.root, args.seeds)
    print(write_results(table, args.seeds, args, args.results, time.time() - t0))
    s0 = os.path.join(args.root, f"seed{args.seeds[0]}")
    for path in plots.plot_runs([os.path.join(s0, "grpo"), os.path.join(s0, "graft")], args.results):
        print(path)


if __name__ == "__main__":
    main()
