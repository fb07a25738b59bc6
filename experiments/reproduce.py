"""
Reproduce the paper's analyses in the tiny world, over several seeds, each seed a whole experiment: seed k is
pair k (its own warm-start: model inits and warm-start data order; tiny_world.pair_specs) and RL seed k, in the
same world with the same held-out problems; seed 0 is the shipped pair (tiny_pair/):

    Table 1   GRPO (n), GRPO (2n) and GRPO (4n) (twice and four times the rollouts) and GRAFT, per model and family
    Table 6   stored-peer GRAFT: each model learns from its partner's logged GRPO (n) run
    Table 2   ablations, every GRAFT row: no gate (w = 1), no floor (delta = 0), no balancing, sequence-level ratio,
              random prompts and random admission (count-matched), peer-first and shuffled minibatches, pooled and
              success-only transfer, and delta 0.7 and 0.9 of the threshold sweep (Table 7); each row's change vs
              full GRAFT beside the paper's (table2_lines)
    Table 9   clipped share of self vs peer tokens
    Fig. 1    complementarity, from the GRAFT run of the first seed (machinery/plots.py)

    python -m experiments.reproduce                                          # seeds 0-4, 90 runs: ~2.5 h on 2 cores, resumable
    python -m experiments.reproduce --seeds 0 --steps 20 --root runs/quick   # a quick look
    python -m experiments.reproduce --tables-only                            # the tables from the recorded runs, running none

Writes results/tiny_results.md and results/tiny_results.json (mean +- std over seeds of the
final held-out pass@1 per model and family, and deltas vs GRPO (n)), results/headline.md (the
README's table), results/accuracy_seeds.png (held-out accuracy over training, seed spread as a
band) and seed 0's plots next to them. It also evaluates GRPO (n) and GRAFT before and after RL
near-greedily (T 0.01), next to the paper's T 0.6. With the default --results, it also puts the headline
table into README.md and the tables into docs/results.md, between their `<!-- experiments/reproduce.py -->`
markers.
Runs go to runs/reproduce/seed<k>/<variant>/. A run folder that is already there is reused
(resumed, or taken as it is when finished) only if its config.json holds exactly this
reproduction's settings; otherwise nothing runs and the error names each differing setting
(use another --root, or delete the folder). Jobs run two at a time by default (--jobs), each
single-threaded (--threads 1, part of each run's settings): Tables 1 and 6 over every seed first, then the
ablations, so that a reproduction cut short has its main table over every pair.

Across sessions (the whole reproduction takes longer than one): as each run ends, what the tables need of it
is recorded under results/tiny_runs/seed<k>/<variant>/ (record_run: config.json, summary.json, evals.jsonl, and
the exchange statistics and near-greedy evaluations it would otherwise need its folder for), a few KB a run,
to be committed. A recorded run is not run again (with the same settings; else the error names them), so a
later session, without the run folders, continues where one stopped. It reruns only what a missing folder is
needed for: a seed's GRPO (n) run whose log a stored-peer run reads, and the first seed's GRPO (n) and GRAFT
runs, whose logs draw the plots; each run is deterministic, so a rerun gives the recorded numbers again.
"""

import argparse
import glob
import json
import multiprocessing
import os
import shutil
import statistics
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

import torch
from tqdm import tqdm

import graft_min
from machinery import plots, runlog, settings, tiny_world
from machinery.wheels import ROOT

# Held-out evaluation every 8 steps: the curves over steps of every recorded run (results/tiny_runs/) and of the
# regime map. Pinned here, not read from the tiny preset: the main job evaluates less often (settings.PRESETS), and a
# run's cadence is one of the settings a recorded run is reused under.
EVAL_EVERY = 8

# variant -> (method, extra flags, which models it reports)
VARIANTS = {
    "grpo_4n": ("grpo", ["--n", "32"], "ab"),
    "grpo_2n": ("grpo", ["--n", "16"], "ab"),
    "grpo": ("grpo", [], "ab"),
    "graft": ("graft", [], "ab"),
    "stored_a": ("stored", ["--train", "a"], "a"),
    "stored_b": ("stored", ["--train", "b"], "b"),
    "no_gate": ("graft", ["--no-gate"], "ab"),
    "delta_0": ("graft", ["--delta", "0"], "ab"),
    "success_only": ("graft", ["--success-only"], "ab"),
    "peer_first": ("graft", ["--peer-order", "first"], "ab"),
    "no_balance": ("graft", ["--no-balance"], "ab"),
    "seq_ratio": ("graft", ["--seq-ratio"], "ab"),
    "random_prompts": ("graft", ["--random-prompts"], "ab"),
    "random_admission": ("graft", ["--random-admission"], "ab"),
    "peer_shuffle": ("graft", ["--peer-order", "shuffle"], "ab"),
    "pooled": ("graft", ["--pooled"], "ab"),
    "delta_07": ("graft", ["--delta", "0.7"], "ab"),
    "delta_09": ("graft", ["--delta", "0.9"], "ab"),
}
ORDER = ["grpo", "grpo_2n", "grpo_4n", "graft", "stored_a", "stored_b", "no_gate", "delta_0", "success_only", "peer_first",
         "no_balance", "seq_ratio", "random_prompts", "random_admission", "peer_shuffle", "pooled", "delta_07", "delta_09"]
LABELS = {"grpo": "GRPO (n)", "grpo_2n": "GRPO (2n)", "grpo_4n": "GRPO (4n)", "graft": "GRAFT", "stored_a": "GRAFT stored peer",
          "stored_b": "GRAFT stored peer", "no_gate": "w/o gate (w = 1)", "delta_0": "w/o floor (delta = 0)",
          "success_only": "success-only", "peer_first": "peer minibatches first", "no_balance": "w/o balancing",
          "seq_ratio": "w/o token-level ratio (sequence ratio)", "random_prompts": "random prompts (count-matched)",
          "random_admission": "random admission (count-matched)", "peer_shuffle": "peer minibatches shuffled",
          "pooled": "pooled groups", "delta_07": "delta = 0.7", "delta_09": "delta = 0.9"}
# The paper's Table 2 (pair 1) and its threshold sweep (Table 7): part, variant, and the change of the five-benchmark
# mean vs full GRAFT in points, SmolLM3-3B / Qwen3-1.7B. Every row but GRPO is an ablation: experiments/reproduce.py --tables-only
# writes the tables before all of them are recorded (a '-' row).
TABLE2 = [("component removal", "no_gate", -8.36, -2.51), ("component removal", "delta_0", -1.89, -3.56),
          ("component removal", "no_balance", -2.00, -0.48), ("component removal", "seq_ratio", -1.85, -0.45),
          ("random selection", "random_prompts", -2.40, -1.58), ("random selection", "random_admission", -1.86, -1.09),
          ("peer position", "peer_first", -2.45, -1.71), ("peer position", "peer_shuffle", -3.57, -1.03),
          ("transfer rule (2b)", "pooled", -3.99, -2.66), ("transfer rule (2b)", "success_only", -7.84, -3.93),
          ("threshold (Table 7)", "delta_07", -2.89, -0.54), ("threshold (Table 7)", "delta_09", -0.92, -1.54),
          ("baseline", "grpo", -4.46, -2.24)]


def jobs_for(variants, seeds, flags, root):
    """(cfg, method, run folder) per variant and seed; finished runs are resumed, i.e. skipped
    (check_reuse first makes sure that they hold these settings)."""
    jobs = []
    for seed in seeds:
        for variant in variants:
            method, extra, _ = VARIANTS[variant]
            out = os.path.join(root, f"seed{seed}", variant)
            if method == "stored":  # the partner's GRPO (n) log of the same seed
                extra = extra + ["--peer-log", os.path.join(root, f"seed{seed}", "grpo", "trajectories.jsonl")]
            cfg = settings.parse_args(["--pair", "tiny", "--seed", str(seed), "--method", method, "--out", out,
                                        "--resume", *flags, *extra])
            jobs.append((cfg, method, out))
    return jobs


def record_of(records, out):
    """The record folder of the run folder `out` (.../seed<k>/<variant>): records/seed<k>/<variant>."""
    return os.path.join(records, os.path.basename(os.path.dirname(out)), os.path.basename(out))


def peer_tail(peer_log):
    """seed<k>/grpo/trajectories.jsonl of a stored-peer run's --peer-log: the part that does not name the --root."""
    return os.path.normpath(peer_log).split(os.sep)[-3:]


def check_reuse(jobs, records=None, flags_only=False):
    """Refuse (SystemExit) if a job's record or folder holds a run made with other settings: a finished run
    would be reported as this reproduction's, an unfinished one resumed into a mix. Every key but
    the bookkeeping ones (runlog.BOOKKEEPING) must match, --steps, the evaluation cadence and the stack too; a
    record of a stored-peer run matches whatever --root its seed's GRPO (n) log was under.
    flags_only (--tables-only): only the records, on the settings that the flags make (not the model paths, which
    settings.run_config finds by warm-starting the tiny pair, nor the stack, which collect checks across runs)."""
    errors = []
    for cfg, method, out in jobs:
        recorded = records and os.path.exists(os.path.join(record_of(records, out), "summary.json"))
        where = record_of(records, out) if recorded else out
        if not recorded and (flags_only or not os.path.exists(os.path.join(out, "checkpoint.pt"))):
            continue  # nothing to reuse: the run starts from scratch
        new = {**vars(cfg), "method": method} if flags_only else settings.run_config(cfg, method)
        saved = runlog.saved_config(where)
        if recorded and method == "stored" and peer_tail(saved["peer_log"]) == peer_tail(new["peer_log"]):
            saved["peer_log"] = new["peer_log"]  # its seed's GRPO (n) log, under whichever --root made the record
        try:
            runlog.check_config(saved, new, os.path.join(where, "config.json"),
                                ignore=runlog.BOOKKEEPING, keys=sorted(new) if flags_only else None,
                                fix="experiments/reproduce.py reuses a run folder or record only with the same settings; "
                                    "give another --root (or --results), or delete it to rerun the run")
        except runlog.ConfigMismatch as e:
            errors.append(str(e))
    if errors:
        raise SystemExit("experiments/reproduce.py: " + "\n".join(errors))


def check_machine(records):
    """Refuse (SystemExit) to add runs to records made on another CPU model with a pair warm-started there: the
    warm-start differs from one CPU to another (docs/runs.md, "Across machines"), so the new runs would be another
    pair's, and a rerun of a recorded one would overwrite its numbers with that pair's. Records of the shipped pairs
    (model paths "tiny_pair/<key>": settings.recorded_path) are every machine's: only the RL part's last bits
    differ (0.001 in one cell of 24 across CPU kernels, docs/runs.md). The CPU is in config.json ("machine") since
    issue 38; records without it are not compared."""
    here, seen = settings.machine(), set()
    for path in glob.glob(os.path.join(records, "*", "*", "config.json")):
        config = runlog.read_json(path)
        paths = config.get("model_paths", {}).values()
        if not paths or not all(p.startswith(os.path.basename(tiny_world.SHIPPED) + os.sep) for p in paths):
            seen.add(config.get("machine"))
    other = sorted(m for m in seen - {None, here})
    if other:
        raise SystemExit(f"experiments/reproduce.py: {records} holds runs made on {', '.join(other)} with pairs warm-started "
                         f"there; this CPU is {here}, whose warm-start makes other pairs, so its runs would not belong "
                         f"in these tables. Run on that CPU, or give another --results (and --root) for a "
                         f"reproduction of this CPU's own")


CURVES = ("grpo", "grpo_2n", "grpo_4n", "graft")  # the variants whose step-by-step training record is kept (steps.jsonl)
STEP_KEYS = ("reward_mean", "all_fail_share", "peer_responses", "admitted", "admitted_correct", "clip_self", "clip_peer")
STATS = ("all_fail_share", "groups_exchanged", "responses_admitted", "clip_self", "clip_peer")
FIRST_LAST = ("all_fail_first_last", "train_reward_first_last", "train_all_fail_first_last")


def weak_family(model):
    """The (sub-)family the tiny preset's model was taught mostly the wrong habit on: its weak one (the same for
    every seed's pair)."""
    return tiny_world.weak_family(settings.tiny_specs(settings.parse_args(["--pair", "tiny"]))["ab".index(model)])


def exchange_stats(folder):
    """What a GRAFT run's exchange carried into each receiver, per step, from its logs: the groups it
    received, the receiver's own mixed groups (its own GRPO signal), the correct share of the sent
    groups before the gate and of the admitted responses after it, the admitted share, the net
    weighted advantage sum_j w_j a_j of the admitted responses, and the peer share of the update's
    tokens. The sent groups are replayed with select_exchange on the logged rewards."""
    n = runlog.read_json(os.path.join(folder, "config.json"))["n"]
    steps = {}
    for t in runlog.read_jsonl(os.path.join(folder, "trajectories.jsonl")):
        steps.setdefault(t["step"], {}).setdefault(t["model"], []).append(t["rewards"])
    sent, mixed = {"a": [], "b": []}, {"a": 0, "b": 0}
    for groups in steps.values():
        k = {m: [int(sum(r)) for r in groups[m]] for m in "ab"}
        to_b, to_a = graft_min.select_exchange(k["a"], k["b"], n)
        sent["b"] += [groups["a"][q] for q in to_b]
        sent["a"] += [groups["b"][q] for q in to_a]
        for m in "ab":
            mixed[m] += sum(0 < x < n for x in k[m])
    stats, metrics = {}, runlog.read_jsonl(os.path.join(folder, "metrics.jsonl"))
    for m in "ab":
        ms = [x for x in metrics if x["model"] == m]
        admitted = sum(x["admitted"] for x in ms)
        stats[m] = {"groups_per_step": len(sent[m]) / len(steps), "own_mixed_per_step": mixed[m] / len(steps),
                    "correct_sent": sum(map(sum, sent[m])) / max(1, n * len(sent[m])),
                    "admitted": admitted / max(1, sum(x["peer_responses"] for x in ms)),
                    "correct_admitted": sum(x["admitted_correct"] for x in ms) / max(1, admitted),
                    "net_weighted_adv": sum(x["weighted_adv_admitted"] for x in ms) / len(ms),
                    "peer_tokens": sum(x["tokens_peer"] for x in ms) / sum(x["tokens_peer"] + x["tokens_self"] for x in ms)}
    return stats


GREEDY_T = 0.01  # greedy in effect: a logit lead of 0.05 already gives odds of e^5 = 148 to 1


def greedy_evals(jobs):
    """Held-out pass@1 at T = GREEDY_T, one sample per problem, of finished runs (jobs: jobs_for's
    tuples) at the start (the warm-start) and at the end (the last checkpoint). Is RL's gain at
    T 0.6 more than a sharper sampling distribution? Returns {variant: {model: {"start" | "end":
    {family: {seed: pass@1}}}}}; the start is evaluated once per seed and model."""
    out, start = {}, {}
    for cfg, _, folder in tqdm(jobs, desc=f"held-out at T {GREEDY_T}"):
        cfg = argparse.Namespace(**{**vars(cfg), "eval_temperature": GREEDY_T, "eval_samples": 1})
        ckpt = runlog.load_checkpoint(os.path.join(folder, "checkpoint.pt"))
        if ckpt["next_step"] != cfg.steps:
            raise SystemExit(f"experiments/reproduce.py: {folder} stopped at step {ckpt['next_step']} of {cfg.steps}")
        _, heldout = settings.load_data(cfg)
        paths = settings.model_paths(cfg)
        for m in "ab":
            pol = graft_min.make_policy(m, paths[m], cfg.lr, cfg)
            if (cfg.seed, m) not in start:
                start[cfg.seed, m] = graft_min.evaluate(pol, heldout, cfg, 0)
            pol.load(ckpt, optimizer=False)  # its weights, to evaluate
            row = out.setdefault(os.path.basename(folder), {}).setdefault(m, {})
            for when, res in (("start", start[cfg.seed, m]), ("end", graft_min.evaluate(pol, heldout, cfg, cfg.steps))):
                for fam, value in res.items():
                    if not isinstance(value, dict):  # pass@1 per family and the mean, not the finished shares
                        row.setdefault(when, {}).setdefault(fam, {})[cfg.seed] = value
    return out


def step_records(folder):
    """A run's training log (metrics.jsonl) cut to what the notebooks draw over steps, per step and model: STEP_KEYS
    (the ones the run logged) and each family's reward and all-fail share, rounded to 4 digits (~15 KB a run)."""
    def r4(x):
        return round(x, 4) if isinstance(x, float) else x
    rows = []
    for m in runlog.read_jsonl(os.path.join(folder, "metrics.jsonl")):
        row = {"step": m["step"], "model": m["model"], **{k: r4(m[k]) for k in STEP_KEYS if k in m}}
        row["families"] = {f: {k: r4(v) for k, v in d.items()} for f, d in m.get("families", {}).items()}
        rows.append(row)
    return rows


def record_run(job, records):
    """Record a finished run for the tables (see the module docstring): its config.json and evals.jsonl, GRAFT's
    exchange_stats (exchange.json), GRPO (n)'s and GRAFT's greedy_evals (greedy.json), the CURVES variants'
    step_records (steps.jsonl), then its summary.json, last: a record holding summary.json is whole."""
    cfg, method, out = job
    dest = record_of(records, out)
    os.makedirs(dest, exist_ok=True)
    variant = os.path.basename(out)
    if variant == "graft":
        runlog.write_json(os.path.join(dest, "exchange.json"), exchange_stats(out))
    if variant in ("grpo", "graft"):
        runlog.write_json(os.path.join(dest, "greedy.json"), greedy_evals([job])[variant])
    if variant in CURVES:
        runlog.write_jsonl(os.path.join(dest, "steps.jsonl"), step_records(out))
    keep_files(out, dest)


def keep_files(out, dest, names=("config.json", "evals.jsonl", "summary.json")):
    """Copy a run folder's files into its record, each atomically, in order: summary.json last marks it whole."""
    os.makedirs(dest, exist_ok=True)
    for name in names:
        shutil.copyfile(os.path.join(out, name), os.path.join(dest, name + ".tmp"))
        os.replace(os.path.join(dest, name + ".tmp"), os.path.join(dest, name))


def recorded_greedy(records, seeds_of):
    """greedy_evals' structure for GRPO (n) and GRAFT, put together from the records' greedy.json (whose
    seed keys JSON made strings)."""
    out = {}
    for variant in ("grpo", "graft"):
        for seed in seeds_of[variant]:
            for m, whens in runlog.read_json(os.path.join(records, f"seed{seed}", variant, "greedy.json")).items():
                for when, fams in whens.items():
                    for fam, by_seed in fams.items():
                        out.setdefault(variant, {}).setdefault(m, {}).setdefault(when, {}).setdefault(fam, {})[seed] = \
                            by_seed[str(seed)]
    return out


def run_one(job):
    """graft_min.run(cfg, method, out) in a worker process (a module-level function, so that it pickles)."""
    return graft_min.run(*job)


class InProcess:
    """The executor of one worker: each job runs at once, in this process (as runner.run_parallel does), and
    leaves this process's thread count as it found it (a run sets its own: --threads)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, job):
        future, threads = Future(), torch.get_num_threads()
        try:
            future.set_result(fn(job))  # an error is raised here, with its traceback
        finally:
            torch.set_num_threads(threads)
        return future


def run_jobs(jobs, workers, records, record=None, desc="reproduce: runs"):
    """Run (cfg, method, out) jobs, `workers` at a time, each in its own process on one thread (one worker: in this
    one), in order, and record each as it ends (record: record_run unless given; record(job, records)), so that a
    session that stops keeps every finished run. A stored-peer run waits for the GRPO (n) run of its seed when that
    one is among the jobs: it reads its log."""
    record, pending, running = record or record_run, list(jobs), {}

    def ready(job):
        _, method, out = job
        grpo = os.path.join(os.path.dirname(out), "grpo")
        return method != "stored" or all(o != grpo for _, _, o in pending + list(running.values()))

    bar = tqdm(total=len(jobs), desc=desc, unit="run")
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) if workers > 1 else InProcess()
    with pool:
        while pending or running:
            while len(running) < workers and any(ready(j) for j in pending):
                job = next(j for j in pending if ready(j))
                pending.remove(job)
                cfg, method, out = job
                cfg = argparse.Namespace(**{**vars(cfg), "bar_position": len(running), "threads": cfg.threads or 1})
                running[pool.submit(run_one, (cfg, method, out))] = job
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                future.result()  # a run's error ends the reproduction here, with its traceback
                record(job, records)
                bar.update(1)
    bar.close()


def still_to_run(jobs, records, first_seed):
    """The jobs without a record, plus the recorded ones whose folder a later step reads and that is gone: the
    GRPO (n) run of a seed whose stored-peer runs are still to run, and the first seed's GRPO (n) and GRAFT
    runs (their logs draw the plots). Jobs keep their order."""
    todo = {out for _, _, out in jobs if not os.path.exists(os.path.join(record_of(records, out), "summary.json"))}
    needed = {os.path.join(os.path.dirname(out), "grpo") for _, method, out in jobs if method == "stored" and out in todo}
    needed |= {os.path.join(os.path.dirname(out), v) for _, _, out in jobs for v in ("grpo", "graft")
               if os.path.basename(os.path.dirname(out)) == f"seed{first_seed}"}
    return [job for job in jobs if job[2] in todo or (job[2] in needed and not os.path.exists(
        os.path.join(job[2], "summary.json")))]


def greedy_lines(greedy, table, fams, seeds):
    """The markdown table of greedy_evals next to the T 0.6 evaluations, mean over seeds."""
    samples = settings.PRESETS["tiny"]["eval_samples"]
    lines = [f"#### Evaluation temperature: held-out pass@1 at T 0.6 ({samples} samples) and T {GREEDY_T} (greedy "
             "in effect, 1 sample), mean over seeds", "",
             "| model | family | " + " | ".join(f"{v} T {t}" for v in ("start", "GRPO (n)", "GRAFT")
                                                 for t in (0.6, GREEDY_T)) + " |", "|---|---|" + "---|" * 6]
    for m in "ab":
        for fam in fams:
            cells = []
            for v in ("start", "grpo", "graft"):
                near = greedy["grpo"][m]["start"] if v == "start" else greedy[v][m]["end"]
                cells += [statistics.mean(table[v][m][fam][s] for s in seeds), statistics.mean(near[fam][s] for s in seeds)]
            lines.append(f"| {m.upper()} | {fam} | " + " | ".join(f"{x:.3f}" for x in cells) + " |")
    return lines + [""]


def eval_curves(root, seeds_of, variants=("grpo", "grpo_2n", "grpo_4n", "graft")):
    """{variant: {seed: the run's evals.jsonl rows}}: held-out pass@1 along the way, of the variants that
    seeds_of names (experiments/regimes.py runs no GRPO (4n))."""
    return {v: {s: runlog.read_jsonl(os.path.join(root, f"seed{s}", v, "evals.jsonl")) for s in seeds_of[v]}
            for v in variants if v in seeds_of}


def collect(root, seeds_of):
    """({variant: {model: {key: {seed: value}}}}, wall seconds of all runs): final held-out pass@1
    per family and run statistics, read from each run's summary.json. Refuses (SystemExit) runs made on
    different software stacks (versions, CPU kernels: settings.software_stack), naming the folders."""
    table, wall, stacks = {}, 0.0, {}
    for variant, seeds in seeds_of.items():
        for seed in seeds:
            folder = os.path.join(root, f"seed{seed}", variant)
            summary = runlog.read_json(os.path.join(folder, "summary.json"))
            stacks.setdefault(json.dumps(summary.get("stack"), sort_keys=True), []).append(folder)
            wall += summary["wall_seconds"]
            for m in VARIANTS[variant][2]:
                s = summary["models"][m]
                row = table.setdefault(variant, {}).setdefault(m, {})
                for key, value in list(s["end"].items()) + [(k, s[k] or 0.0) for k in STATS]:
                    row.setdefault(key, {})[seed] = value
                for key in ("all_fail_first_last", "train_reward_first_last", "train_all_fail_first_last"):
                    row.setdefault(key, {})[seed] = s[key]
                if variant == "grpo":  # every variant of a seed starts from the same weights and evaluation
                    for key, value in s["start"].items():
                        table.setdefault("start", {}).setdefault(m, {}).setdefault(key, {})[seed] = value
    if len(stacks) > 1:
        raise SystemExit("experiments/reproduce.py: these runs were made on different software stacks and do not go into one "
                         "table; rerun the odd ones out on one stack (another --root, or delete their folders):\n" +
                         "\n".join(f"  {stack}: {', '.join(folders)}" for stack, folders in stacks.items()))
    return table, wall


def mean_std(xs):
    xs = list(xs)
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def rollouts(variant, args):
    """Responses a model samples for training in one run of `variant` (steps x prompts per step x n): the budget
    that GRPO (2n) and (4n) spend two and four times of; GRAFT's exchange samples nothing more."""
    extra = VARIANTS[variant][1]
    n = int(extra[1]) if extra[:1] == ["--n"] else settings.parse_args(["--pair", "tiny"]).n
    return args.steps * settings.PRESETS["tiny"]["prompts_per_step"] * n


def write_results(table, seeds_of, args, out_dir, wall, greedy=None):
    """results/tiny_results.md and .json; every delta compares runs of the same seeds. greedy:
    greedy_evals' result, shown next to the T 0.6 evaluations when given."""
    fams = sorted(k for k in table["grpo"]["a"] if k not in STATS + FIRST_LAST and k != "mean")
    command = " ".join(["python -m experiments.reproduce", *args.argv])
    lines = [f"### Tiny-pair results ({args.steps} steps per run)", "",
             f"Written by `{command}`. Final held-out pass@1 (T 0.6, top-p 0.95), mean +- std over seeds; in",
             "brackets the change vs GRPO (n) on the same seeds. Clip columns: share of clipped tokens (%).",
             "The start row is the same models before RL, evaluated with each seed's sampling.", ""]
    for m in ("a", "b"):
        lines += [f"#### Model {m.upper()} (weak family: {weak_family(m)})", "",
                  "| variant | seeds | " + " | ".join(fams) + " | mean | all-fail share, first -> last 20% of steps | "
                  "groups received | clip self % | clip peer % |", "|---|---|" + "---|" * (len(fams) + 5)]
        start = [f"{mu:.3f} +- {sd:.3f}" for mu, sd in
                 (mean_std(table["start"][m][fam][s] for s in seeds_of["grpo"]) for fam in fams + ["mean"])]
        lines.append(f"| start (warm-start, before RL) | {len(seeds_of['grpo'])} | " + " | ".join(start) + " | | | | |")
        for variant in ORDER:
            if m not in table.get(variant, {}):
                continue
            row, seeds = table[variant][m], seeds_of[variant]
            cells = []
            for fam in fams + ["mean"]:
                mu, sd = mean_std(row[fam][s] for s in seeds)
                base = statistics.mean(table["grpo"][m][fam][s] for s in seeds)
                cells.append(f"{mu:.3f} +- {sd:.3f}" + ("" if variant == "grpo" else f" ({mu - base:+.3f})"))
            first, last = (statistics.mean(v[i] for v in row["all_fail_first_last"].values()) for i in (0, 1))
            cells += [f"{first:.3f} -> {last:.3f}",
                      f"{statistics.mean(row['groups_exchanged'].values()):.0f}",
                      f"{100 * statistics.mean(row['clip_self'].values()):.2f}",
                      f"{100 * statistics.mean(row['clip_peer'].values()):.2f}"]
            lines.append(f"| {LABELS[variant]} | {len(seeds)} | " + " | ".join(cells) + " |")
        lines.append("")

    lines += table2_lines(table, seeds_of)

    def gain(variant, m):
        seeds = seeds_of[variant]
        return statistics.mean(table[variant][m]["mean"][s] - table["grpo"][m]["mean"][s] for s in seeds)

    def fam_gain(variant, base, m, fam):  # mean over seeds of variant - base on one family
        return statistics.mean(table[variant][m][fam][s] - table[base][m][fam][s] for s in seeds_of[variant])

    lines += ["#### Training reward (T = 1) per family, first -> last 20% of steps, mean over seeds", "",
              "| variant | model | " + " | ".join(fams) + " |", "|---|---|" + "---|" * len(fams)]
    for variant in ("grpo", "grpo_2n", "grpo_4n", "graft"):
        for m in "ab":
            cells = [" -> ".join(f"{statistics.mean(v[fam][i] for v in table[variant][m]['train_reward_first_last'].values()):.3f}"
                                 for i in (0, 1)) for fam in fams]
            lines.append(f"| {LABELS[variant]} | {m.upper()} | " + " | ".join(cells) + " |")
    lines.append("")
    online = {m: gain("graft", m) for m in "ab"}
    stored = {m: gain(f"stored_{m}", m) for m in "ab"}
    total_online, total_stored = sum(online.values()), sum(stored.values())
    # a share of a gain under one point (the seed spread of a cell is 1-2 points) would be a ratio of noise
    kept = (f"it keeps {total_stored / total_online:.0%} of the online gain (paper: 84%)" if total_online >= 0.01
            else f"the online gain ({100 * total_online:+.1f} points) is under one point, so a kept share would be "
                 "a ratio of noise (paper: 84% of +2.11)")
    weak = {m: weak_family(m) for m in "ab"}
    curves = eval_curves(args.records, seeds_of)
    steps = sorted({e["step"] for e in curves["grpo"][seeds_of["grpo"][0]]})
    lines += ["#### The weak families along the way: held-out pass@1 at each evaluation, mean over seeds", "",
              "| model | variant | " + " | ".join(f"step {t}" for t in steps) + " |", "|---|---|" + "---|" * len(steps)]
    for m in "ab":
        for v, runs in curves.items():
            at = [statistics.mean(e[weak[m]] for evals in runs.values() for e in evals
                                  if e["model"] == m and e["step"] == t) for t in steps]
            lines.append(f"| {m.upper()} ({weak[m]}) | {LABELS[v]} | " + " | ".join(f"{x:.3f}" for x in at) + " |")
    lines.append("")
    xs = {seed: runlog.read_json(os.path.join(args.records, f"seed{seed}", "graft", "exchange.json"))
          for seed in seeds_of["graft"]}
    lines += ["#### What the exchange carried (GRAFT, per receiver and step, mean over seeds)", "",
              "| receiver | groups received | own mixed groups | correct in sent groups | admitted (s > delta) | "
              "correct among admitted | net weighted advantage | peer share of tokens |", "|---|---|---|---|---|---|---|---|"]
    for m in "ab":
        v = {key: statistics.mean(x[m][key] for x in xs.values()) for key in xs[seeds_of["graft"][0]][m]}
        lines.append(f"| {m.upper()} | {v['groups_per_step']:.1f} | {v['own_mixed_per_step']:.1f} | {v['correct_sent']:.2f} | "
                     f"{v['admitted']:.2f} | {v['correct_admitted']:.2f} | {v['net_weighted_adv']:+.1f} | {v['peer_tokens']:.2f} |")
    lines.append("")
    if greedy:
        lines += greedy_lines(greedy, table, fams, seeds_of["graft"])
    lines += ["#### Summary", "",
              "- GRPO (n) - start, weak family: " + ", ".join(
                  f"{m.upper()} ({weak[m]}) {fam_gain('grpo', 'start', m, weak[m]):+.3f}" for m in "ab") + ".",
              "- GRAFT - GRPO (n), weak family: " + ", ".join(
                  f"{m.upper()} ({weak[m]}) {fam_gain('graft', 'grpo', m, weak[m]):+.3f}" for m in "ab") +
              "; GRAFT - GRPO (2n): " + ", ".join(
                  f"{m.upper()} {fam_gain('graft', 'grpo_2n', m, weak[m]):+.3f}" for m in "ab") +
              "; GRAFT - GRPO (4n): " + ", ".join(
                  f"{m.upper()} {fam_gain('graft', 'grpo_4n', m, weak[m]):+.3f}" for m in "ab") + ".",
              "- rollouts sampled per model and run: " + ", ".join(
                  f"{LABELS[v]} {rollouts(v, args):,}" for v in ("grpo", "graft", "grpo_2n", "grpo_4n")) + ".",
              f"- GRAFT - GRPO (n), held-out mean over both families: A {online['a']:+.3f}, B {online['b']:+.3f} "
              "(paper: +2.11 points on average).",
              f"- stored-peer GRAFT - GRPO (n): A {stored['a']:+.3f}, B {stored['b']:+.3f}; {kept}.",
              f"- compute: {wall / 60:.0f} single-core minutes over {sum(map(len, seeds_of.values()))} runs "
              f"(about {wall / 60 / args.jobs:.0f} min of wall time with {args.jobs} parallel jobs)", ""]
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, "tiny_results.md")
    with open(md + ".tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(md + ".tmp", md)
    headline = ["| model | family | start | GRPO (n) | GRPO (2n) | GRPO (4n) | GRAFT | GRAFT - GRPO (n) |",
                "|---|---|---|---|---|---|---|---|"]
    for m in "ab":
        for fam in fams:
            cells = [f"{statistics.mean(table[v][m][fam][s] for s in seeds_of['grpo']):.3f}"
                     for v in ("start", "grpo", "grpo_2n", "grpo_4n", "graft")]
            label = fam + (" (weak)" if fam == weak[m] else "")
            headline.append(f"| {m.upper()} | {label} | " + " | ".join(cells) + f" | {fam_gain('graft', 'grpo', m, fam):+.3f} |")
    with open(os.path.join(out_dir, "headline.md.tmp"), "w") as f:
        f.write("\n".join(headline) + "\n")
    os.replace(os.path.join(out_dir, "headline.md.tmp"), os.path.join(out_dir, "headline.md"))
    runlog.write_json(os.path.join(out_dir, "tiny_results.json"),
                      {"command": command, "steps": args.steps, "seeds": seeds_of, "table": table,
                       "graft_gain": online, "stored_gain": stored, "greedy": greedy})
    return "\n".join(lines)


def table2_lines(table, seeds_of):
    """The paper's Table 2 (TABLE2) in its layout: each row's change vs full GRAFT on the same seeds, in points of
    held-out pass@1 (x 100, mean +- std over seeds of the per-seed change), on each model's weak sub-skill and on the
    mean over families, beside the paper's change of its five-benchmark mean (pair 1: SmolLM3-3B, Qwen3-1.7B;
    our A and B are not those models). A row whose runs are not recorded yet shows '-'."""
    weak = {m: weak_family(m) for m in "ab"}
    lines = ["#### Table 2: ablations, change vs full GRAFT in points (held-out pass@1 x 100), mean +- std over seeds",
             "", f"| part | variant | seeds | A {weak['a']} (weak) | A mean | B {weak['b']} (weak) | B mean | "
             "paper SmolLM3 | paper Qwen3 |", "|---|---|---|---|---|---|---|---|---|"]
    for part, v, smol, qwen in TABLE2:
        seeds = seeds_of.get(v, []) if "a" in table.get(v, {}) else []
        cells = ["-"] * 4
        if seeds:
            cells = ["{:+.1f} +- {:.1f}".format(*mean_std(100 * (table[v][m][key][s] - table["graft"][m][key][s])
                                                          for s in seeds)) for m in "ab" for key in (weak[m], "mean")]
        lines.append(f"| {part} | {LABELS[v]} | {len(seeds) or '-'} | " + " | ".join(cells) +
                     f" | {smol:+.2f} | {qwen:+.2f} |")
    return lines + ["", "w/o balancing sends every Eq. 4 candidate; the paper's row (App. G, \"SGT + GRAFT how\") also "
                    "sends all-success peer groups (docs/differences.md). Choices for the rows the paper leaves open: "
                    "docs/differences.md.", ""]


def update_between_markers(path, name, text, tool="experiments/reproduce.py"):
    """Replace what stands between `<!-- TOOL: NAME -->` and `<!-- TOOL: end NAME -->` in the file at
    `path` with `text` (atomically); returns False if the file or its markers are missing."""
    begin, end = f"<!-- {tool}: {name} -->", f"<!-- {tool}: end {name} -->"
    if not os.path.exists(path):
        return False
    with open(path) as f:
        old = f.read()
    if begin not in old or end not in old:
        return False
    new = old[:old.index(begin) + len(begin)] + "\n" + text.strip() + "\n" + old[old.index(end):]
    with open(path + ".tmp", "w") as f:
        f.write(new)
    os.replace(path + ".tmp", path)
    return True


def default_eval_every(steps):
    """EVAL_EVERY, or less for runs too short to be evaluated 4 times at that cadence."""
    return min(EVAL_EVERY, max(1, steps // 4))


def run_flags(steps, eval_every=None):
    """The flags every run of a reproduction gets: its length, its evaluation cadence (default_eval_every) and one
    thread; they are part of the settings a recorded run is reused under."""
    return ["--steps", str(steps), "--eval-every", str(eval_every or default_eval_every(steps)), "--threads", "1"]


def main(argv=None):
    p = argparse.ArgumentParser(description="Reproduce the paper's tables in the tiny world.")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                   help="training seeds (every variant runs each)")
    p.add_argument("--steps", type=int, default=settings.PRESETS["tiny"]["steps"],
                   help="steps per run (default: the tiny preset's, as the main job)")
    p.add_argument("--eval-every", type=int, default=None,
                   help=f"held-out evaluation every K steps (default: {EVAL_EVERY}, at least 4 times a run)")
    p.add_argument("--root", default=os.path.join("runs", "reproduce"), help="where the run folders go")
    p.add_argument("--results", default="results", help="where the tables and plots go")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="runs in parallel")
    p.add_argument("--tables-only", action="store_true",
                   help="run nothing: write the tables from the runs recorded in --results (no plots); an ablation "
                        "not yet recorded for every seed shows '-' in Table 2 and is left out of the other tables")
    args = p.parse_args(argv)
    args.argv = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--tables-only"]  # same numbers
    args.eval_every = args.eval_every or default_eval_every(args.steps)
    flags = run_flags(args.steps, args.eval_every)
    args.records = os.path.join(args.results, "tiny_runs")
    # Tables 1 and 6 for every seed first (a reproduction cut short by a session's end has its main table over every
    # pair), seed by seed, GRPO (4n) and (2n), the longest, first, a seed's stored runs as soon as its GRPO (n) run
    # is done; then the ablations, seed by seed
    core = ("grpo_4n", "grpo_2n", "grpo", "graft", "stored_a", "stored_b")
    jobs = (jobs_for(core, args.seeds, flags, args.root) +
            jobs_for([v for v in VARIANTS if v not in core], args.seeds, flags, args.root))
    if args.tables_only:
        check_reuse(jobs, args.records, flags_only=True)
        todo = {os.path.basename(out) for _, _, out in jobs  # the variants with a seed not recorded
                if not os.path.exists(os.path.join(record_of(args.records, out), "summary.json"))}
        needed = [v for v in todo if v not in {row[1] for row in TABLE2} - {"grpo"}]  # all but the ablations
        if needed:
            raise SystemExit(f"experiments/reproduce.py --tables-only: {', '.join(sorted(needed))} not recorded for every seed in "
                             f"{args.records}; the tables need them (run experiments/reproduce.py)")
        seeds_of = {v: args.seeds for v in VARIANTS if v not in todo}
    else:
        check_machine(args.records)
        for seed in args.seeds:  # each seed's pair, warm-started once (seed 0: shipped), before the workers
            settings.model_paths(settings.parse_args(["--pair", "tiny", "--seed", str(seed)]))
        check_reuse(jobs, args.records)
        todo = still_to_run(jobs, args.records, args.seeds[0])
        print(f"experiments/reproduce.py: {len(jobs) - len(todo)} of {len(jobs)} runs recorded in {args.records}; {len(todo)} to run")
        run_jobs(todo, args.jobs, args.records)
        seeds_of = {v: args.seeds for v in VARIANTS}
    table, wall = collect(args.records, seeds_of)
    greedy = recorded_greedy(args.records, seeds_of)
    print(write_results(table, seeds_of, args, args.results, wall, greedy))
    if args.results == "results":  # the default: the README's headline and docs/results.md show these numbers
        for path, name, file in (("README.md", "headline", "headline.md"), (os.path.join("docs", "results.md"),
                                 "tables", "tiny_results.md")):
            with open(os.path.join(args.results, file)) as f:
                if update_between_markers(os.path.join(ROOT, path), name, f.read()):
                    print(f"updated {path}")
    if args.tables_only:
        return
    bands = os.path.join(args.results, "accuracy_seeds.png")
    plots.plot_seed_bands({LABELS[v]: runs for v, runs in eval_curves(args.records, seeds_of).items()}, bands,
                          f"Held-out pass@1 (T 0.6) over training, mean +- std over seeds {args.seeds}")
    print(bands)
    s0 = os.path.join(args.root, f"seed{args.seeds[0]}")
    for path in plots.plot_runs([os.path.join(s0, "grpo"), os.path.join(s0, "graft")], args.results):
        print(path)


if __name__ == "__main__":
    main()
