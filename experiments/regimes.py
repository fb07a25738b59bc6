"""
Where does GRAFT's rescue show? A regime map over two knobs of the tiny world (the method untouched).

The paper's claim is that a model learns from prompts on which it never samples a success, because its
peer did. In the landed habit world each receiver fixes its one global wrong habit from its own mixed
groups, so GRAFT ends level with GRPO. Here the world is split by sub-skill (--world-split): each
receiver's weak skill is only the sub-family where the units column carries (A: addc, B: mulc), taught
with the habit a share --weak-habit of the time, while its teacher is clean on the rest of that family.
Two knobs, the same for both models and all three methods:

    weak habit  how much of the weak sub-skill the receiver's own samples can teach: at 1.0 its
                warm-start never saw the right procedure there; at 0.6 it samples it now and then
    narrate     how much of a response the disagreement is: terse traces (~35 characters) or each
                column narrated (~75), with the same few decisive tokens (Eq. 7 averages per token)

At each point: GRPO (n), GRPO (2n) and GRAFT from the same warm-start, --seeds each, seed k being the point's
pair k (its own warm-start: tiny_world.pair_specs) and RL seed k (experiments/reproduce.py's run folders and reuse rules).
Writes results/regimes.png (deltas against what the receiver's own samples get right on its weak sub-skill at
the start: its T = 1 training reward there in the first 20% of GRPO (n)'s steps, since the held-out pass@1 at
T 0.6 is 0.000 at several points; at the first evaluation and at the end, seed spread as error bars; and what
the gate did), results/regimes.json, each finished point's numbers in results/regimes/<point>.json (a later
run reuses them without the run folders, if made with the same flags, seeds, software stack and pairs), and the table
between the `<!-- experiments/regimes.py: map -->` markers of docs/results.md.
Across sessions (the map takes ~4.5 h on 2 cores): as each run ends, what the table needs of it is recorded in
results/regimes/<point>/seed<k>/<variant>/ (record_point_run), to be committed; a later session, without the run
folders, runs only the runs without a record.

    python -m experiments.regimes                  # the whole map (resumable: recorded runs are reused, others resumed)
    python -m experiments.regimes --report         # the table and figure from the points finished so far
"""

import argparse
import os
import shlex
import statistics
import sys
import time

from machinery import plots, runlog, settings, tiny_world
from machinery.wheels import ROOT
from experiments import reproduce

VARIANTS = ("grpo_2n", "grpo", "graft")  # the longest first


def point_name(weak_habit, narrate):
    return f"habit{weak_habit:g}" + ("_narrated" if narrate else "_terse")


def point_flags(weak_habit, narrate, steps, eval_every, run_flags=()):
    """The graft_min.py flags of one grid point (world knobs, run length, one thread a run, any extra ones)."""
    flags = ["--world-split", "--weak-habit", str(weak_habit), "--steps", str(steps), "--eval-every", str(eval_every),
             "--threads", "1"]
    return flags + (["--narrate", "--max-new-tokens", "96"] if narrate else []) + list(run_flags)


def _at(curves, variant, seed, model, fam, step):
    """Held-out pass@1 of one run on (model, fam) at `step`; curves: reproduce.eval_curves' evaluations."""
    return next(e[fam] for e in curves[variant][seed] if e["model"] == model and e["step"] == step)


def record_point_run(job, records):
    """Keep what point_result needs of a finished run (records/seed<k>/<variant>/): config.json, evals.jsonl,
    GRAFT's exchange statistics (exchange.json, reproduce.exchange_stats), and summary.json last (it marks a
    record whole); a few KB a run, to be committed, so that a point cut by a session's end keeps its finished runs."""
    _, _, out = job
    dest = reproduce.record_of(records, out)
    if os.path.basename(out) == "graft":
        runlog.write_json(os.path.join(dest, "exchange.json"), reproduce.exchange_stats(out))
    reproduce.keep_files(out, dest)


def point_result(records, seeds, eval_every, steps):
    """What one finished grid point shows, per receiver: start pass@1 on its weak sub-skill, GRAFT - GRPO (n)
    and GRPO (2n) - GRPO (n) there at the first evaluation and at the end (per seed), the worst GRAFT - GRPO (n)
    over its other families at the end (mean over seeds), all-fail shares, and the exchange (reproduce.exchange_stats),
    read from the point's run records (record_point_run)."""
    cfg = runlog.read_json(os.path.join(records, f"seed{seeds[0]}", "graft", "config.json"))
    specs = settings.tiny_specs(argparse.Namespace(**cfg))
    xs = {s: runlog.read_json(os.path.join(records, f"seed{s}", "graft", "exchange.json")) for s in seeds}
    curves = reproduce.eval_curves(records, {v: seeds for v in VARIANTS})  # each evals.jsonl read once
    out = {}
    for m, spec in zip("ab", specs):
        weak = tiny_world.weak_family(spec)
        start = [_at(curves, "grpo", s, m, weak, 0) for s in seeds]
        diff = lambda v, step: [_at(curves, v, s, m, weak, step) - _at(curves, "grpo", s, m, weak, step) for s in seeds]
        summary = {v: [runlog.read_json(os.path.join(records, f"seed{s}", v, "summary.json"))["models"][m] for s in seeds]
                   for v in ("grpo", "graft")}
        others = [f for f in summary["grpo"][0]["end"] if f not in (weak, "mean")]
        out[m] = {"weak": weak, "start": statistics.mean(start),
                  # what the receiver's own samples get right there (T = 1), first 20% of GRPO (n)'s steps
                  "own_reward": statistics.mean(x["train_reward_first_last"][weak][0] for x in summary["grpo"]),
                  "graft_first": diff("graft", eval_every),
                  "grpo2n_first": diff("grpo_2n", eval_every),
                  "graft_end": diff("graft", steps),
                  "grpo2n_end": diff("grpo_2n", steps),
                  "grpo_end": statistics.mean(x["end"][weak] for x in summary["grpo"]),
                  "worst_other": min((statistics.mean(g["end"][f] - b["end"][f] for g, b in
                                                      zip(summary["graft"], summary["grpo"])), f) for f in others),
                  "all_fail": {v: [statistics.mean(x["train_all_fail_first_last"][weak][i] for x in summary[v])
                                   for i in (0, 1)] for v in summary},
                  **{k: statistics.mean(x[m][k] for x in xs.values()) for k in xs[seeds[0]][m]}}
    return out


def table_lines(results, seeds, steps, eval_every):
    ms = lambda xs: f"{statistics.mean(xs):+.3f} +- {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"
    lines = [f"Held-out pass@1 (T 0.6) on the receiver's weak sub-skill; deltas mean +- std over seeds {seeds} "
             f"at step {eval_every} (first evaluation) and step {steps} (end). Exchange: per receiver and step, "
             "mean over seeds.", "",
             "| point | receiver (weak) | start | own T = 1 reward, first 20% | GRPO (n) end | GRAFT - GRPO (n), first / end | "
             "GRPO (2n) - GRPO (n), first / end | worst other family, GRAFT - GRPO (n) | all-fail first -> last 20%, "
             "GRPO / GRAFT | groups received / own mixed | admitted | correct sent / admitted | net weighted adv |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        for m in "ab":
            r = res[m]
            af = " / ".join(f"{a:.2f} -> {b:.2f}" for a, b in (r["all_fail"]["grpo"], r["all_fail"]["graft"]))
            lines.append(f"| {name} | {m.upper()} ({r['weak']}) | {r['start']:.3f} | {r['own_reward']:.3f} | {r['grpo_end']:.3f} | "
                         f"{ms(r['graft_first'])} / {ms(r['graft_end'])} | {ms(r['grpo2n_first'])} / {ms(r['grpo2n_end'])} | "
                         f"{r['worst_other'][0]:+.3f} ({r['worst_other'][1]}) | {af} | "
                         f"{r['groups_per_step']:.1f} / {r['own_mixed_per_step']:.1f} | {r['admitted']:.2f} | "
                         f"{r['correct_sent']:.2f} / {r['correct_admitted']:.2f} | {r['net_weighted_adv']:+.1f} |")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description="A regime map of GRAFT vs GRPO over two knobs of the tiny world.")
    p.add_argument("--weak-habits", type=float, nargs="+", default=[1.0, 0.9, 0.75, 0.6],
                   help="levels of --weak-habit: the receiver's teacher's habit share on its weak sub-skill")
    p.add_argument("--narrate", default="off,on", help="levels of --narrate: off, on or off,on")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds per point")
    p.add_argument("--steps", type=int, default=settings.PRESETS["tiny"]["steps"], help="steps per run")
    p.add_argument("--eval-every", type=int, default=reproduce.EVAL_EVERY, help="evaluation cadence")
    p.add_argument("--root", default=os.path.join("runs", "regimes"), help="where the run folders go")
    p.add_argument("--results", default="results", help="where regimes.png and regimes.json go")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="runs in parallel")
    p.add_argument("--report", action="store_true", help="only write the table and figure from the finished points")
    p.add_argument("--run-flags", default="", help="extra graft_min.py flags for every run, in quotes "
                   "(e.g. a quick look: \"--prompts-per-step 16 --eval-problems 50\"); part of each point's settings")
    args = p.parse_args(argv)
    narrate = [{"off": False, "on": True}[v] for v in args.narrate.split(",")]
    grid = [(h, v) for v in narrate for h in args.weak_habits]  # terse points first: the cheaper half
    results, saved_wall = {}, {}
    for h, v in grid:
        name, root = point_name(h, v), os.path.join(args.root, point_name(h, v))
        flags = point_flags(h, v, args.steps, args.eval_every, shlex.split(args.run_flags))
        # a finished point's numbers are kept in results/regimes/<point>.json (committed): a later session
        # reuses them without the run folders, as long as they were made with the same flags, seeds, software
        # stack (settings.software_stack: the versions and the CPU capability) and pairs (each seed's pair keys;
        # a point saved before there was one of these, e.g. when every seed shared one pair, is run again)
        device = settings.parse_args(["--pair", "tiny", *flags]).device
        saved_path = os.path.join(args.results, "regimes", f"{name}.json")
        cfgs = [settings.parse_args(["--pair", "tiny", "--seed", str(seed), *flags]) for seed in args.seeds]
        pair_keys = [[spec.key() for spec in settings.tiny_specs(cfg)] for cfg in cfgs]
        key = {"flags": flags, "seeds": args.seeds, "stack": settings.software_stack(device), "pairs": pair_keys}
        if os.path.exists(saved_path) and runlog.read_json(saved_path)["key"] == key:
            saved = runlog.read_json(saved_path)
            results[name], saved_wall[name] = saved["result"], saved["wall_seconds"]
            continue
        if args.report:  # only the saved points: a run makes a point from its records once it checked their settings
            continue
        # an unfinished point's finished runs are recorded in results/regimes/<point>/ (record_point_run), to be
        # committed, with its wall time so far (wall.json): a later session runs only the others
        records = os.path.join(args.results, "regimes", name)
        wall_path = os.path.join(records, "wall.json")
        jobs = reproduce.jobs_for(VARIANTS, args.seeds, flags, root)
        reproduce.check_reuse(jobs, records)  # the records' settings, stack and pairs too
        reproduce.check_machine(records)  # its pairs are warm-started on the CPU that runs them
        todo = [(cfg, method, out) for cfg, method, out in jobs
                if not os.path.exists(os.path.join(reproduce.record_of(records, out), "summary.json"))]
        if todo:
            t0, before = time.time(), runlog.read_json(wall_path)["seconds"] if os.path.exists(wall_path) else 0.0
            keep_wall = lambda: runlog.write_json(wall_path, {"seconds": before + time.time() - t0})

            def record(job, records):  # with the wall time so far, which a killed session would not write
                record_point_run(job, records)
                keep_wall()
            try:  # the wall time is kept even when the point is stopped (Ctrl-C) and resumed by a later session
                for cfg in cfgs:  # each seed's pair with runs to go, warm-started once, first
                    if any(job[0].seed == cfg.seed for job in todo):
                        settings.model_paths(cfg)
                reproduce.run_jobs(todo, args.jobs, records, record=record, desc=f"regime point {name}: runs")
            finally:
                keep_wall()
        results[name] = point_result(records, args.seeds, args.eval_every, args.steps)  # every run recorded now
        saved_wall[name] = runlog.read_json(wall_path)["seconds"] if os.path.exists(wall_path) else None
        runlog.write_json(saved_path, {"key": key, "result": results[name], "wall_seconds": saved_wall[name]})
    if not results:
        raise SystemExit("experiments/regimes.py: no grid point has finished yet; run `python -m experiments.regimes` first")
    lines = table_lines(results, args.seeds, args.steps, args.eval_every)
    wall = sum(w or 0.0 for w in saved_wall.values())
    lines += ["", f"Written by `python -m experiments.regimes {' '.join(argv if argv is not None else sys.argv[1:])}`: "
                  f"{len(results)} of {len(grid)} points, {wall / 60:.0f} min of wall time with {args.jobs} parallel "
                  "jobs (warm-starts included)."]
    text = "\n".join(lines)
    print(text)
    runlog.write_json(os.path.join(args.results, "regimes.json"),
                      {"points": results, "seeds": args.seeds, "steps": args.steps, "eval_every": args.eval_every,
                       "wall_seconds": saved_wall})
    png = os.path.join(args.results, "regimes.png")
    plots.plot_regimes(results, png, args.eval_every, args.steps)
    print(png)
    if args.results == "results":
        if reproduce.update_between_markers(os.path.join(ROOT, "docs", "results.md"), "map", text, tool="experiments/regimes.py"):
            print("updated docs/results.md")


if __name__ == "__main__":
    main()
