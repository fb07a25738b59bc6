"""
How runs are launched around graft_min.run's loop: a run folder opened fresh or resumed from its checkpoint
(RunFolder), runs side by side in processes (run_parallel), and the main job's GRPO-vs-GRAFT comparison (compare).
The training function comes in as an argument (`run`), so this file never imports graft_min.py.
"""

import argparse
import functools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import torch

import rollout
from machinery import ddp, memory, runlog, settings, stats

LOGS = ("metrics", "trajectories", "evals")


class RunFolder:
    """One run's folder (docs/runs.md): config.json, the three JSONL logs, checkpoint.pt and summary.json. Rank 0
    alone writes (main); every rank reads the checkpoint. The constructor checks, before any model loads, that a
    resumed folder was made with these settings; `restore` continues it or starts it afresh."""

    def __init__(self, cfg, method, out):
        self.out, self.main, self.history = out, ddp.is_main(), {}  # history: {model: metrics lines of this session}
        self.files = {key: os.path.join(out, f"{key}.jsonl") for key in LOGS}
        self.ckpt_path, self.ckpt = os.path.join(out, "checkpoint.pt"), None
        self.resuming = cfg.resume and os.path.exists(self.ckpt_path)
        saved = runlog.saved_config(out) if self.resuming else None
        if self.resuming and not cfg.threads:
            cfg.threads = saved.get("threads")  # pinned: on a CPU, torch's results depend on the thread count
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.config = settings.run_config(cfg, method)
        if self.resuming:
            runlog.check_world_size(out, saved, self.config)
            self.ckpt = runlog.load_checkpoint(self.ckpt_path)
            runlog.report_changes(out, runlog.check_resume(out, saved, self.config, self.ckpt["next_step"]))
            runlog.report_machine(out, saved, self.config)
        if method == "stored":
            runlog.check_peer_log(self.config)
            cfg.peer = self.config["peer"]

    def size(self, cfg, policies, like=None):
        """Resolve `auto` batch sizes (the resumed folder's own, else those of the run folder `like`, else measured)
        and record them; say how large a checkpoint will be."""
        source = self.out if self.resuming else like
        memory.resolve_auto_sizes(cfg, list(policies.values()), ddp.world_size(),
                                  sizes_from=os.path.join(source, "config.json") if source else None)
        self.config["sizes"] = {"gen_batch": cfg.gen_batch, "micro_batch": cfg.micro_batch}
        if self.main:
            runlog.announce_checkpoints(self.out, [p.model for p in policies.values()], cfg)

    def restore(self, policies):
        """Load the checkpoint into the policies and cut the logs back to its step; or, with none, make the folder
        with its config.json and empty logs. Returns (first step to run, wall seconds so far)."""
        if self.ckpt is None:
            if self.main:
                os.makedirs(self.out, exist_ok=True)
                for path in self.files.values():
                    open(path, "w").close()
                runlog.write_json(os.path.join(self.out, "config.json"), self.config)
            return 0, 0.0
        for pol in policies.values():
            pol.load(self.ckpt)
        start, wall = self.ckpt["next_step"], self.ckpt["wall"]
        self.ckpt = None  # the weights now live in the policies
        for key, path in self.files.items() if self.main else ():
            runlog.truncate_jsonl(path, start + 1 if key == "evals" else start)
        runlog.log.info("resumed %s at step %d", self.out, start)
        return start, wall

    def log_step(self, step, batch, metrics, groups, cfg):
        """Append the step's metrics and trajectories; say once if a receiver's gate stays shut (stats.gate_report)."""
        for name in metrics if self.main else ():
            runlog.append_jsonl(self.files["metrics"], metrics[name])
            runlog.log_groups(self.files["trajectories"], step, name, batch, groups[name], cfg.n)
            self.history.setdefault(name, []).append(metrics[name])
            shut = stats.gate_report(name, self.history[name], cfg.delta)
            if shut:
                runlog.log.warning(shut)

    def log_eval(self, step, name, result):
        if self.main:
            runlog.append_jsonl(self.files["evals"], {"step": step, "model": name, **result})

    def start_evals(self, like):
        """{model: its step-0 evaluation} in the run folder `like` (compare: GRPO's, for GRAFT), when that run has
        this one's settings but the method: the same weights, seeds and sizes give the same records. Else {}."""
        if not like:
            return {}
        config, evals = os.path.join(like, "config.json"), os.path.join(like, "evals.jsonl")
        ignore = {"method", "bar_position", "out", "resume"}  # where it goes, not what it computes
        if not (os.path.exists(config) and os.path.exists(evals)) or \
                runlog.config_differences(runlog.read_json(config), self.config, ignore=ignore):
            return {}
        return {e["model"]: {k: v for k, v in e.items() if k not in ("step", "model")}
                for e in runlog.read_jsonl(evals) if e["step"] == 0}

    def checkpoint(self, done, wall, policies):
        if self.main:
            runlog.save_checkpoint(self.ckpt_path, {
                "next_step": done, "wall": wall, "models": {n: p.model.state_dict() for n, p in policies.items()},
                "opts": {n: p.opt.state_dict() for n, p in policies.items()}})

    def finish(self, wall):
        """Write and return summary.json (rank 0; None on the others)."""
        if not self.main:
            return None
        summary = runlog.summarize(self.out, wall)
        runlog.write_json(os.path.join(self.out, "summary.json"), summary)
        return summary


def _call(run, job):
    return run(*job)


def run_parallel(jobs, workers, run, desc=None):
    """Run (cfg, method, out[, like]) jobs with `run`, `workers` at a time in separate processes (1: in this
    one), each on one thread unless its --threads says otherwise; desc: a bar over the runs."""
    if workers <= 1 or len(jobs) == 1:
        return [run(*job) for job in rollout.progress(jobs, desc, unit="run")]
    jobs = [(argparse.Namespace(**{**vars(cfg), "bar_position": i % workers, "threads": cfg.threads or 1}), m, out)
            for i, (cfg, m, out) in enumerate(jobs)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = pool.map(functools.partial(_call, run), jobs)
        return list(rollout.progress(results, desc, total=len(jobs), unit="run"))


def compare(cfg, run):
    """The main job: GRPO and GRAFT from the same warm-start, seed and per-model rollout budget, each trained by
    `run`. The tiny pair's two runs go side by side, one per core, when there are two cores; real models one after
    the other (one GPU, or a CPU's memory), GRAFT then taking GRPO's `auto` batch sizes and its step-0 evaluation
    (the same start: evaluated once). Prints the table, writes summary.json and the plots; returns the summary
    (None on ranks other than 0)."""
    settings.model_paths(cfg)  # warm-start the tiny pair (or fetch the cpu pair) once, before the runs
    methods = ("grpo", "graft")
    side_by_side = cfg.pair == "tiny" and not (cfg.model_a or cfg.model_b) and not cfg.device.startswith("cuda")
    workers = min(2, os.cpu_count() or 1) if side_by_side and ddp.world_size() == 1 else 1
    jobs = [(cfg, m, os.path.join(cfg.out, m)) for m in methods]
    if workers == 1:
        jobs[1] += (jobs[0][2],)  # like: GRPO's folder
    results = dict(zip(methods, run_parallel(jobs, workers, run)))
    if not ddp.is_main():
        return None
    summary = {"config": vars(cfg), "stack": results["grpo"]["stack"], "methods": results}
    runlog.write_json(os.path.join(cfg.out, "summary.json"), summary)
    runlog.print_table(results)
    from machinery import plots
    written = plots.plot_runs([cfg.out])
    print(f"\nrun folders: {os.path.join(cfg.out, 'grpo')}  {os.path.join(cfg.out, 'graft')}")
    print(f"summary: {os.path.join(cfg.out, 'summary.json')}   plots: {', '.join(written)}")
    return summary
