"""Tests for reusing run folders: --resume compares config.json with the new settings and refuses
other ones by name, stored mode checks the logged run's settings, experiments/reproduce.py reuses a run only
with its own settings, and a CLI run killed with SIGKILL resumes to exactly the uninterrupted run.

In-process runs use the tiny random models and the hash reward of test_loop.py; the kill test
runs the real CLI on the warm-started tiny pair with the real verifier."""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zlib

import pytest
import torch

from conftest import another_machine
import graft_min
from machinery import pairs, runlog, runner, settings, tiny_world
from experiments import reproduce

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


@pytest.fixture(autouse=True)
def deterministic_reward(monkeypatch):
    monkeypatch.setattr(graft_min, "reward", fake_reward)


def run(model_dirs, out, *flags):
    cfg = settings.parse_args(["--prompts-per-step", "6", "--n", "4", "--max-new-tokens", "6", "--lr", "1e-3",
                                "--eval-problems", "2", "--eval-samples", "1", "--ckpt-every", "1", "--eval-every",
                                "1", "--model-a", model_dirs[0], "--model-b", model_dirs[1], "--out", str(out), *flags])
    return graft_min.run(cfg, cfg.method, str(out))


def differing_keys(error):
    """The keys an error message lists, one '  key: saved X, now Y' line each."""
    return {line.split(":")[0].strip() for line in str(error).splitlines() if line.startswith("  ")}


def folder_bytes(out):
    return {name: (out / name).read_bytes() for name in sorted(os.listdir(out))}


# ---------------------------------------------------------------- comparing configs

def test_config_differences_name_each_key_with_both_values():
    saved = {"lr": 1e-3, "n": 8, "eval_data": ["x=1"], "out": "runs/a", "old_flag": True}
    new = {"lr": 2e-3, "n": 8, "eval_data": ("x=1",), "out": "runs/b", "new_flag": 0}
    # a tuple equals the list JSON stored; a key only one side has is shown as MISSING there
    assert runlog.config_differences(saved, new, ignore=("out",)) == [
        ("lr", 1e-3, 2e-3), ("new_flag", runlog.MISSING, 0), ("old_flag", True, runlog.MISSING)]
    assert runlog.config_differences(saved, new, keys=("n", "eval_data")) == []
    with pytest.raises(runlog.ConfigMismatch, match="lr: saved 0.001, now 0.002"):
        runlog.check_config(saved, new, "runs/a/config.json", "fix it", ignore=("out",))


# ---------------------------------------------------------------- --resume

def test_resume_refuses_other_settings_and_names_each_key(model_dirs, tmp_path):
    out = tmp_path / "run"
    run(model_dirs, out, "--method", "graft", "--steps", "1")
    before = folder_bytes(out)
    with pytest.raises(runlog.ConfigMismatch) as e:
        run(model_dirs, out, "--method", "grpo", "--steps", "2", "--resume", "--lr", "2e-3", "--n", "2", "--no-gate")
    assert differing_keys(e.value) == {"method", "lr", "n", "no_gate"}  # --steps may change: not listed
    for line in ('method: saved "graft", now "grpo"', "lr: saved 0.001, now 0.002", "n: saved 4, now 2",
                 "no_gate: saved false, now true"):
        assert line in str(e.value)
    assert "another folder (--out)" in str(e.value)  # and how to fix it
    assert folder_bytes(out) == before  # refused before touching anything


def test_the_table_2_ablation_flags_are_run_settings_and_older_folders_read_them_as_off(tmp_path):
    flags = {"seq_ratio": "--seq-ratio", "random_prompts": "--random-prompts", "random_admission": "--random-admission"}
    base = ["--model-a", "a", "--model-b", "b", "--method", "graft"]  # model paths given: nothing loads
    config = settings.run_config(settings.parse_args(base), "graft")
    out = tmp_path / "run"  # a folder from before these flags: its config.json lacks them
    runlog.write_json(str(out / "config.json"), {k: v for k, v in config.items() if k not in flags})
    saved = runlog.saved_config(str(out))
    assert all(saved[k] is False for k in flags)
    assert runlog.check_resume(str(out), saved, config, 0) == []  # the run as it was: resumes
    for key, flag in flags.items():  # with the ablation on it is another experiment: refused by name
        with pytest.raises(runlog.ConfigMismatch) as e:
            runlog.check_resume(str(out), saved, settings.run_config(settings.parse_args(base + [flag]), "graft"), 0)
        assert differing_keys(e.value) == {key} and f"{key}: saved false, now true" in str(e.value)


def test_resume_may_extend_and_change_cadence_but_not_end_before_its_checkpoint(model_dirs, tmp_path):
    out = tmp_path / "run"
    run(model_dirs, out, "--method", "graft", "--steps", "2")
    with pytest.raises(runlog.ConfigMismatch, match="checkpoint is at step 2, after the 1 steps asked for; give "
                                                    "--steps 2 or more"):
        run(model_dirs, out, "--method", "graft", "--steps", "1", "--resume")
    run(model_dirs, out, "--method", "graft", "--steps", "3", "--resume", "--eval-every", "2", "--ckpt-every", "2")
    metrics = runlog.read_jsonl(out / "metrics.jsonl")
    assert [(m["step"], m["model"]) for m in metrics] == [(s, m) for s in range(3) for m in "ab"]
    # evaluated every step up to 2, then at the end (3; 3 is not a multiple of the new --eval-every 2)
    assert [e["step"] for e in runlog.read_jsonl(out / "evals.jsonl")] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert torch.load(out / "checkpoint.pt", weights_only=False)["next_step"] == 3


def test_resume_pins_the_thread_count(model_dirs, tmp_path):
    out, threads = tmp_path / "run", torch.get_num_threads()
    try:
        run(model_dirs, out, "--method", "grpo", "--steps", "1", "--threads", "1")
        assert runlog.read_json(out / "config.json")["threads"] == 1
        with pytest.raises(runlog.ConfigMismatch, match="threads: saved 1, now 2"):
            run(model_dirs, out, "--method", "grpo", "--steps", "2", "--resume", "--threads", "2")
        torch.set_num_threads(2)
        run(model_dirs, out, "--method", "grpo", "--steps", "2", "--resume")  # no --threads: the saved count
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_a_run_records_its_software_stack_and_resume_on_another_warns_in_one_line(model_dirs, tmp_path, caplog):
    import numpy
    import tokenizers
    import transformers
    out = tmp_path / "run"
    run(model_dirs, out, "--method", "grpo", "--steps", "1")
    config = runlog.read_json(out / "config.json")
    stack = config["stack"]
    assert stack["torch"] == torch.__version__ and stack["transformers"] == transformers.__version__
    assert stack["tokenizers"] == tokenizers.__version__ and stack["numpy"] == numpy.__version__
    assert stack["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and stack["python"].count(".") == 2
    assert config["threads"] >= 1
    assert runlog.read_json(out / "summary.json")["stack"] == stack  # and so the summary
    assert config["machine"] == settings.machine() and config["machine"]  # the CPU's model name
    assert runlog.read_json(out / "summary.json")["machine"] == config["machine"]
    # the folder made with another transformers on another CPU: resumed with a warning, not refused
    other_cpu, other_capability = another_machine()
    runlog.write_json(str(out / "config.json"), {**config, "machine": other_cpu, "stack": {
        **stack, "transformers": "5.17.0", "cpu_capability": other_capability}})
    with caplog.at_level("INFO", logger="graft_min"):
        run(model_dirs, out, "--method", "grpo", "--steps", "2", "--resume")
    lines = [r.getMessage() for r in caplog.records if "software stack" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert f"cpu_capability {other_capability} -> {stack['cpu_capability']}" in lines[0]
    assert f"transformers 5.17.0 -> {transformers.__version__}" in lines[0]
    assert "torch" not in lines[0].replace("transformers", "")  # only what differs is named
    assert [r.levelname for r in caplog.records if "software stack" in r.getMessage()] == ["WARNING"]
    cpu, = [r.getMessage() for r in caplog.records if "another CPU" in r.getMessage()]
    assert f"({other_cpu} -> {settings.machine()})" in cpu
    assert torch.load(out / "checkpoint.pt", weights_only=False)["next_step"] == 2


def test_stack_differences_name_each_entry_and_an_unrecorded_stack():
    old, new = {"torch": "2.13.0", "numpy": "2.4.6"}, {"torch": "2.13.0", "numpy": "2.4.7", "python": "3.11.7"}
    assert runlog.stack_differences(old, new) == ["numpy 2.4.6 -> 2.4.7", f"python {runlog.MISSING} -> 3.11.7"]
    assert runlog.stack_differences(new, new) == []
    assert runlog.stack_differences(runlog.MISSING, new)[0].startswith('stack "<not set>" -> ')


def test_resume_refuses_a_checkpoint_without_its_config(model_dirs, tmp_path):
    out = tmp_path / "run"
    run(model_dirs, out, "--method", "grpo", "--steps", "1")
    os.remove(out / "config.json")
    with pytest.raises(runlog.ConfigMismatch, match="has a checkpoint but no config.json"):
        run(model_dirs, out, "--method", "grpo", "--steps", "2", "--resume")


# ---------------------------------------------------------------- stored mode

@pytest.fixture(scope="module")
def grpo_log(model_dirs, tmp_path_factory):
    """A one-step GRPO run whose trajectories.jsonl is the stored peer."""
    out = tmp_path_factory.mktemp("grpo") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graft_min, "reward", fake_reward)
        run(model_dirs, out, "--method", "grpo", "--steps", "1")
    return out


@pytest.mark.parametrize("flags, key", [
    (["--temperature", "0.7"], "temperature"),
    (["--n", "2"], "n"),
    (["--max-new-tokens", "5"], "max_new_tokens"),
    (["--seed", "3"], "seed"),
    (["--world-seed", "1"], "world_seed"),
    (["--prompts-per-step", "3"], "prompts_per_step"),
    (["--plain-prompt"], "plain_prompt"),
    (["--model-a", "B"], "model_paths.a"),  # B's folder where the log has A's: not the logged peer
])
def test_stored_mode_refuses_a_log_sampled_with_other_settings(model_dirs, grpo_log, tmp_path, flags, key):
    flags = [model_dirs[1] if f == "B" else f for f in flags]
    with pytest.raises(runlog.ConfigMismatch) as e:
        run(model_dirs, tmp_path / "stored", "--method", "stored", "--train", "b", "--steps", "1",
            "--peer-log", str(grpo_log / "trajectories.jsonl"), *flags)
    assert differing_keys(e.value) == {key}
    assert str(e.value).startswith(str(grpo_log / "config.json"))


def test_stored_mode_accepts_a_log_with_other_training_settings(model_dirs, grpo_log, tmp_path):
    """The peer's own optimisation (lr, delta, ...) is its business: only how it sampled must agree."""
    summary = run(model_dirs, tmp_path / "stored", "--method", "stored", "--train", "b", "--steps", "1",
                  "--lr", "5e-4", "--delta", "0.5", "--peer-log", str(grpo_log / "trajectories.jsonl"))
    assert set(summary["models"]) == {"b"}


def test_stored_mode_needs_the_logged_runs_config(model_dirs, tmp_path):
    peer_log = tmp_path / "elsewhere" / "trajectories.jsonl"
    peer_log.parent.mkdir()
    peer_log.write_text("")
    with pytest.raises(runlog.ConfigMismatch, match="config.json: not found"):
        run(model_dirs, tmp_path / "stored", "--method", "stored", "--steps", "1", "--peer-log", str(peer_log))


# ---------------------------------------------------------------- experiments/reproduce.py

class Started(Exception):
    """Raised by the stand-in for run_parallel: experiments/reproduce.py got as far as running its jobs."""


def test_reproduce_reuses_a_run_folder_only_with_its_own_settings(model_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": model_dirs[0], "b": model_dirs[1]})
    started = []

    def stop(jobs, workers, records):
        started.append(jobs)
        raise Started
    monkeypatch.setattr(reproduce, "run_jobs", stop)
    root = tmp_path / "reproduce"
    # a finished 100-step GRPO run of seed 0, as `python -m experiments.reproduce --seeds 0` leaves it
    (cfg, method, out), = reproduce.jobs_for(["grpo"], [0], ["--steps", "100", "--eval-every", "100",
                                                             "--threads", "1"], str(root))
    os.makedirs(out)
    runlog.write_json(os.path.join(out, "config.json"), settings.run_config(cfg, method))
    open(os.path.join(out, "checkpoint.pt"), "w").close()
    argv = ["--seeds", "0", "--root", str(root), "--results", str(tmp_path / "results")]

    with pytest.raises(SystemExit) as e:
        reproduce.main(argv + ["--steps", "20", "--eval-every", "20"])
    assert "steps: saved 100, now 20" in str(e.value) and "eval_every: saved 100, now 20" in str(e.value)
    assert differing_keys(e.value) == {"steps", "eval_every"}
    assert started == []  # nothing ran
    with pytest.raises(Started):  # the same settings: the folder is reused
        reproduce.main(argv + ["--steps", "100", "--eval-every", "100"])
    assert out in [o for _, _, o in started[0]]


# ---------------------------------------------------------------- kill -9

KILL_FLAGS = ["--pair", "tiny", "--method", "graft", "--steps", "6", "--prompts-per-step", "8", "--n", "4",
              "--eval-every", "3", "--eval-problems", "8", "--eval-samples", "1", "--ckpt-every", "1", "--threads", "1"]


def cli(out, *extra):
    """`python graft_min.py ...` in a child process, its output in out.log."""
    with open(f"{out}.log", "a") as log:
        return subprocess.Popen([sys.executable, "graft_min.py", *KILL_FLAGS, "--out", str(out), *extra], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)


def logged_steps(path):
    """Steps of the complete lines of a JSONL log that a live process is appending to."""
    steps = []
    if os.path.exists(path):
        for line in open(path):
            if line.endswith("\n"):
                steps.append(json.loads(line)["step"])
    return steps


def without(records, key):
    return [{k: v for k, v in r.items() if k != key} for r in records]


def test_kill_9_mid_run_then_resume_gives_the_uninterrupted_run(tiny_pair_ready, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    assert cli(full).wait(timeout=600) == 0, (tmp_path / "full.log").read_text()[-3000:]

    proc, deadline = cli(part), time.monotonic() + 600
    while not any(s >= 1 for s in logged_steps(part / "metrics.jsonl")):  # step 1 is being logged: kill now
        assert proc.poll() is None, (tmp_path / "part.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no step 1 within 10 minutes"
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before the kill: give it more --steps"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    killed_at = torch.load(part / "checkpoint.pt", weights_only=False)["next_step"]
    assert 1 <= killed_at < 6 and not (part / "summary.json").exists()
    assert max(logged_steps(part / "metrics.jsonl")) >= killed_at  # logged past the checkpoint: to be cut

    assert cli(part, "--resume").wait(timeout=600) == 0, (tmp_path / "part.log").read_text()[-3000:]
    assert f"at step {killed_at}" in (tmp_path / "part.log").read_text()
    read = runlog.read_jsonl
    assert without(read(part / "metrics.jsonl"), "seconds") == without(read(full / "metrics.jsonl"), "seconds")
    assert read(part / "trajectories.jsonl") == read(full / "trajectories.jsonl")
    assert read(part / "evals.jsonl") == read(full / "evals.jsonl")
    summary = {d: runlog.read_json(d / "summary.json") for d in (part, full)}
    assert summary[part].pop("wall_seconds") > 0 and summary[full].pop("wall_seconds") > 0
    assert summary[part] == summary[full]
    # the run exercised the whole step: real rewards, and peer groups exchanged (in seed 0: 3 each way)
    assert any(m["reward_mean"] > 0 for m in read(full / "metrics.jsonl"))
    assert all(m["groups_exchanged"] > 0 for m in summary[full]["models"].values())


def test_first_last_means_the_first_and_last_fifth_of_the_steps():
    ms = [{"x": float(i)} for i in range(10)]
    assert runlog.first_last(ms, lambda m: m["x"]) == (0.5, 8.5)  # steps 0-1 and 8-9
    assert runlog.first_last(ms[:3], lambda m: m["x"]) == (0.0, 2.0)  # at least one step each


def _summary(start, end, all_fail, reward):
    """A run summary as runlog.summarize writes it; start / end: {family: pass@1} for both models."""
    model = lambda m: {"start": {**start[m], "mean": sum(start[m].values()) / 2},  # noqa: E731
                       "end": {**end[m], "mean": sum(end[m].values()) / 2},
                       "all_fail_share": 0.5, "groups_exchanged": 10, "responses_admitted": 60, "clip_self": 0.001,
                       "clip_peer": 0.002, "all_fail_first_last": all_fail,
                       "train_reward_first_last": {"add": reward, "mul": reward},
                       "train_all_fail_first_last": {"add": all_fail, "mul": all_fail}}
    return {"wall_seconds": 60.0, "models": {"a": model("a"), "b": model("b")}}


def _records(root, variants):
    """Records of runs of seeds 0 and 1 as reproduce.collect and write_results read them, in a world of two whole
    families (add, mul); every family of a variant gains its gain over the start (plus 0.02 on seed 1); the
    sequence-ratio runs gain 0.075, and 0.01 more on seed 1. Returns the start values."""
    start = {"a": {"add": 0.10, "mul": 0.50}, "b": {"add": 0.70, "mul": 0.05}}
    for seed, bump in ((0, 0.0), (1, 0.02)):
        for variant in variants:
            gain = {"grpo": 0.05, "grpo_2n": 0.07, "grpo_4n": 0.08, "graft": 0.09, "seq_ratio": 0.075}.get(variant, 0.06)
            gain += bump + (0.01 if (variant, seed) == ("seq_ratio", 1) else 0.0)
            end = {m: {f: v + gain for f, v in fams.items()} for m, fams in start.items()}
            runlog.write_json(str(root / f"seed{seed}" / variant / "summary.json"),
                              _summary(start, end, (0.8, 0.6 - bump), (0.1, 0.2)))
    for seed in (0, 1):  # held-out curves: evaluations at steps 0 and 7, the end value at step 7
        for variant, gain in (("grpo", 0.05), ("grpo_2n", 0.07), ("grpo_4n", 0.08), ("graft", 0.09)):
            with open(root / f"seed{seed}" / variant / "evals.jsonl", "w") as f:
                for step, g in ((0, 0.0), (7, gain + 0.02 * seed)):
                    for m in "ab":
                        f.write(json.dumps({"step": step, "model": m, **{k: v + g for k, v in start[m].items()}}) + "\n")
    for seed in (0, 1):  # the GRAFT runs' logs, for the exchange table: one step, B sends prompt 0 to A
        folder = root / f"seed{seed}" / "graft"
        runlog.write_json(str(folder / "config.json"), {"n": 4})
        with open(folder / "trajectories.jsonl", "w") as f:
            for model, rewards in (("a", [[0, 0, 0, 0], [1, 1, 0, 0]]), ("b", [[1, 1, 1, 0], [0, 0, 0, 0]])):
                for r in rewards:
                    f.write(json.dumps({"step": 0, "model": model, "rewards": r}) + "\n")
        with open(folder / "metrics.jsonl", "w") as f:
            for model, admitted, correct, wadv, tok in (("a", 3, 2, 1.5, 30), ("b", 4, 2, 0.0, 40)):
                f.write(json.dumps({"step": 0, "model": model, "peer_responses": 4, "admitted": admitted,
                                    "admitted_correct": correct, "weighted_adv_admitted": wadv, "tokens_peer": tok,
                                    "tokens_self": 70}) + "\n")
        runlog.write_json(str(folder / "exchange.json"), reproduce.exchange_stats(str(folder)))  # as record_run does
        os.remove(folder / "trajectories.jsonl"), os.remove(folder / "metrics.jsonl")  # the tables need only records
    return start


# near-greedy evaluations as greedy_evals returns them: start and end per seed
GREEDY = {v: {m: {"start": {f: {0: 0.2, 1: 0.3} for f in ("add", "mul")},
                  "end": {f: {0: end_g, 1: end_g + 0.1} for f in ("add", "mul")}} for m in "ab"}
          for v, end_g in (("grpo", 0.4), ("graft", 0.5))}


def test_reproduce_tables_compare_runs_of_the_same_seeds(tmp_path, monkeypatch):
    # a world of two whole families (--no-world-split): A weak on add, B on mul (the preset's split world is addc / mulc)
    monkeypatch.setattr(reproduce, "weak_family", {"a": "add", "b": "mul"}.get)
    root = tmp_path / "runs"
    _records(root, reproduce.VARIANTS)
    seeds_of = {v: [0, 1] for v in reproduce.VARIANTS}
    table, wall = reproduce.collect(str(root), seeds_of)
    args = argparse.Namespace(argv=["--steps", "7"], steps=7, jobs=2, root=str(root), records=str(root))
    text = reproduce.write_results(table, seeds_of, args, str(tmp_path / "results"), wall, GREEDY)
    # B mul: start 0.05 at T 0.6 and 0.25 near-greedy; GRPO 0.05 + 0.05 / 0.07 -> 0.110 and 0.45; GRAFT 0.150 and 0.55
    assert "| B | mul | 0.050 | 0.250 | 0.110 | 0.450 | 0.150 | 0.550 |" in text
    # weak families A add, B mul; GRPO gained 0.05 / 0.07 over the start on the two seeds
    assert "- GRPO (n) - start, weak family: A (add) +0.060, B (mul) +0.060." in text
    assert ("- GRAFT - GRPO (n), weak family: A (add) +0.040, B (mul) +0.040; GRAFT - GRPO (2n): A +0.020, B +0.020; "
            "GRAFT - GRPO (4n): A +0.010, B +0.010." in text)
    # 7 steps x 64 prompts x n: 8 for GRPO (n) and GRAFT, 16 and 32 for the larger budgets
    assert ("- rollouts sampled per model and run: GRPO (n) 3,584, GRAFT 3,584, GRPO (2n) 7,168, GRPO (4n) 14,336."
            in text)
    assert "| GRAFT | 2 | 0.200 +- 0.014 (+0.040) | 0.600 +- 0.014 (+0.040) |" in text  # A: 0.10 + 0.09 / 0.11
    assert "| 0.800 -> 0.590 |" in text  # all-fail share, first -> last, mean over seeds
    assert "| GRPO (n) | A | 0.100 -> 0.200 | 0.100 -> 0.200 |" in text
    # A received B's group of prompt 0 (3 of 4 correct) and has one mixed group of its own (prompt 1);
    # B received A's group of prompt 1 (2 of 4 correct) and has one mixed group (prompt 0)
    assert "| A | 1.0 | 1.0 | 0.75 | 0.75 | 0.67 | +1.5 | 0.30 |" in text
    assert "| B | 1.0 | 1.0 | 0.50 | 1.00 | 0.50 | +0.0 | 0.36 |" in text
    assert "| A (add) | GRAFT | 0.100 | 0.200 |" in text and "| B (mul) | GRPO (2n) | 0.050 | 0.130 |" in text
    headline = (tmp_path / "results" / "headline.md").read_text()
    assert "| A | add (weak) | 0.100 | 0.160 | 0.180 | 0.190 | 0.200 | +0.040 |" in headline
    assert "| B | mul (weak) | 0.050 | 0.110 | 0.130 | 0.140 | 0.150 | +0.040 |" in headline
    # Table 2 in the paper's layout: every row, change vs GRAFT in points on the weak family and the mean, per model
    rows = [line for line in text.split("#### Table 2")[1].split("\n\n")[1].splitlines() if not line.startswith("|---")]
    assert [r.split(" | ")[1] for r in rows[1:]] == [reproduce.LABELS[v] for _, v, _, _ in reproduce.TABLE2]
    assert "| component removal | w/o gate (w = 1) | 2 | " + " | ".join(["-3.0 +- 0.0"] * 4) + " | -8.36 | -2.51 |" in text
    # sequence ratio: -1.5 on seed 0 and -0.5 on seed 1 (mean -1.0, sample std 0.7)
    assert ("| component removal | w/o token-level ratio (sequence ratio) | 2 | " + " | ".join(["-1.0 +- 0.7"] * 4) +
            " | -1.85 | -0.45 |") in text
    assert "| threshold (Table 7) | delta = 0.9 | 2 | " + " | ".join(["-3.0 +- 0.0"] * 4) + " | -0.92 | -1.54 |" in text
    assert "| baseline | GRPO (n) | 2 | " + " | ".join(["-4.0 +- 0.0"] * 4) + " | -4.46 | -2.24 |" in text
    assert "| part | variant | seeds | A add (weak) | A mean | B mul (weak) | B mean | paper SmolLM3 | paper Qwen3 |" in text
    # rows whose runs are not recorded yet render as '-', and leave the other tables
    some = {v: s for v, s in seeds_of.items() if v not in ("random_prompts", "pooled")}
    table, wall = reproduce.collect(str(root), some)
    text = reproduce.write_results(table, some, args, str(tmp_path / "results"), wall, GREEDY)
    assert "| random selection | random prompts (count-matched) | - | - | - | - | - | -2.40 | -1.58 |" in text
    assert "| transfer rule (2b) | pooled groups | - | - | - | - | - | -3.99 | -2.66 |" in text
    assert "| random admission (count-matched) | 2 |" in text and "| pooled groups | 2 |" not in text


def test_runs_are_not_added_to_records_of_another_cpu(tmp_path, monkeypatch):
    # this session's AMD EPYC warm-started another tiny pair than the Intel Xeon that made results/tiny_runs, and a
    # rerun of seed 0's GRPO (n) record overwrote its numbers with that pair's: refused before any warm-start now
    monkeypatch.setattr(settings, "model_paths", lambda cfg: pytest.fail("warm-started before the check"))
    records, other = tmp_path / "results" / "tiny_runs", another_machine()[0]
    runlog.write_json(str(records / "seed0" / "grpo" / "config.json"), {"machine": other})
    with pytest.raises(SystemExit, match=rf"holds runs made on {re.escape(other)} with pairs warm-started there; this CPU is "):
        reproduce.main(["--seeds", "0", "--steps", "2", "--results", str(tmp_path / "results"),
                        "--root", str(tmp_path / "runs")])
    runlog.write_json(str(records / "seed0" / "grpo" / "config.json"), {"machine": settings.machine()})
    reproduce.check_machine(str(records))  # the same CPU: no objection
    # runs of the shipped pairs (settings.recorded_path) are every CPU's: the pair is the same file on each
    shipped = {m: os.path.join("tiny_pair", s.key()) for m, s in zip("ab", tiny_world.TINY)}
    runlog.write_json(str(records / "seed0" / "graft" / "config.json"),
                      {"machine": other, "model_paths": shipped})
    reproduce.check_machine(str(records))
    runlog.write_json(str(records / "seed0" / "graft" / "config.json"),  # one warm-started model: that CPU's pair
                      {"machine": other, "model_paths": {**shipped, "b": "/x/cache/tiny/b"}})
    with pytest.raises(SystemExit, match=rf"holds runs made on {re.escape(other)} with pairs warm-started"):
        reproduce.check_machine(str(records))


def test_tables_only_runs_nothing_and_shows_unrecorded_ablations_as_dashes(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce, "weak_family", {"a": "add", "b": "mul"}.get)
    monkeypatch.setattr(reproduce, "run_jobs", lambda *a: pytest.fail("--tables-only ran a job"))
    monkeypatch.setattr(settings, "model_paths", lambda cfg: pytest.fail("--tables-only warm-started the tiny pair"))
    monkeypatch.setattr(reproduce, "recorded_greedy", lambda records, seeds_of: GREEDY)
    results = tmp_path / "results"
    missing = ("seq_ratio", "delta_07")
    _records(results / "tiny_runs", [v for v in reproduce.VARIANTS if v not in missing])
    argv = ["--tables-only", "--seeds", "0", "1", "--steps", "7", "--results", str(results)]
    jobs = reproduce.jobs_for(reproduce.VARIANTS, [0, 1], ["--steps", "7", "--eval-every", "1", "--threads", "1"],
                              os.path.join("runs", "reproduce"))  # main's jobs for these arguments
    for cfg, method, out in jobs:  # each record's config.json: the settings its run was made with
        if os.path.basename(out) not in missing:
            record = reproduce.record_of(str(results / "tiny_runs"), out)
            config = {**vars(cfg), "method": method} if "graft" not in out else \
                {**runlog.read_json(os.path.join(record, "config.json")), **vars(cfg), "method": method}
            runlog.write_json(os.path.join(record, "config.json"), config)
    reproduce.main(argv)
    text = (results / "tiny_results.md").read_text()
    assert text.startswith("### Tiny-pair results (7 steps per run)\n\nWritten by `python -m experiments.reproduce --seeds 0 1 --steps")
    assert "| component removal | w/o token-level ratio (sequence ratio) | - | - | - | - | - | -1.85 | -0.45 |" in text
    assert "| threshold (Table 7) | delta = 0.7 | - | - | - | - | - | -2.89 | -0.54 |" in text
    assert "| threshold (Table 7) | delta = 0.9 | 2 | " + " | ".join(["-3.0 +- 0.0"] * 4) + " | -0.92 | -1.54 |" in text
    assert not (results / "accuracy_seeds.png").exists()  # tables only
    # a record made with other settings is refused by name, as experiments/reproduce.py refuses to reuse it
    record = reproduce.record_of(str(results / "tiny_runs"), jobs[-1][2])
    config = runlog.read_json(os.path.join(record, "config.json"))
    runlog.write_json(os.path.join(record, "config.json"), {**config, "steps": 8})
    with pytest.raises(SystemExit, match="steps: saved 8, now 7"):
        reproduce.main(argv)
    runlog.write_json(os.path.join(record, "config.json"), config)
    # the tables need GRPO, GRAFT and the stored runs recorded; without one, --tables-only says which
    shutil.rmtree(results / "tiny_runs" / "seed1" / "stored_b")
    with pytest.raises(SystemExit, match="stored_b not recorded for every seed"):
        reproduce.main(argv)


def test_the_committed_records_stay_reusable_with_the_flags_added_since(monkeypatch):
    # every committed record must be experiments/reproduce.py's own under its default flags (a record made before a flag was
    # added lacks its key, read as off); the tiny preset's evaluation cadence is the main job's, not the records'
    monkeypatch.setitem(settings.PRESETS, "tiny", {**settings.PRESETS["tiny"], "eval_every": 32})
    flags = reproduce.run_flags(settings.PRESETS["tiny"]["steps"])
    assert flags == ["--steps", "32", "--eval-every", "8", "--threads", "1"]
    jobs = reproduce.jobs_for(reproduce.VARIANTS, [0, 1, 2, 3, 4], flags, os.path.join("runs", "reproduce"))
    records = os.path.join(ROOT, "results", "tiny_runs")
    recorded = [job for job in jobs if os.path.exists(os.path.join(reproduce.record_of(records, job[2]), "summary.json"))]
    assert len(recorded) == 90  # five pairs x 18 variants
    reproduce.check_reuse(jobs, records, flags_only=True)


def test_a_stored_run_record_is_reused_under_another_root_but_not_with_another_peer(tmp_path):
    # a stored-peer run's config names its peer log under the --root that ran it (here runs/five_pairs): its record
    # is the same run under any root, but one that replayed another seed's GRPO log is not
    flags = reproduce.run_flags(32)
    (cfg, method, out), = reproduce.jobs_for(["stored_a"], [1], flags, os.path.join("runs", "five_pairs"))
    record = tmp_path / "seed1" / "stored_a"
    record.mkdir(parents=True)
    config = {**vars(cfg), "method": method}
    runlog.write_json(str(record / "summary.json"), {})
    runlog.write_json(str(record / "config.json"), config)
    again = reproduce.jobs_for(["stored_a"], [1], flags, os.path.join("runs", "reproduce"))
    assert again[0][0].peer_log == os.path.join("runs", "reproduce", "seed1", "grpo", "trajectories.jsonl")
    reproduce.check_reuse(again, str(tmp_path), flags_only=True)
    runlog.write_json(str(record / "config.json"),
                      {**config, "peer_log": os.path.join("runs", "five_pairs", "seed0", "grpo", "trajectories.jsonl")})
    with pytest.raises(SystemExit, match="peer_log: saved .*seed0.*, now .*seed1"):
        reproduce.check_reuse(again, str(tmp_path), flags_only=True)


def test_a_recorded_run_holds_what_the_tables_need_and_is_not_run_again(model_dirs, tmp_path, monkeypatch):
    # a real (tiny random) GRAFT run of seed 0, recorded as experiments/reproduce.py records each run as it ends
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": model_dirs[0], "b": model_dirs[1]})
    monkeypatch.setattr(graft_min, "evaluate", lambda pol, heldout, cfg, step: {"add": 0.5 + step, "mul": 0.25,
                                                                                "mean": 0.375 + step / 2})
    flags = ["--steps", "2", "--eval-every", "1", "--prompts-per-step", "6", "--n", "4", "--max-new-tokens", "6",
             "--eval-problems", "2", "--threads", "1"]
    root, records = tmp_path / "runs", tmp_path / "records"
    jobs = reproduce.jobs_for(["grpo", "graft", "stored_a"], [0, 1], flags, str(root))
    (cfg, method, out) = jobs[1]  # seed 0, GRAFT
    graft_min.run(cfg, method, out)
    reproduce.record_run(jobs[1], str(records))
    rec = records / "seed0" / "graft"
    assert sorted(os.listdir(rec)) == ["config.json", "evals.jsonl", "exchange.json", "greedy.json", "steps.jsonl",
                                       "summary.json"]
    assert sum(f.stat().st_size for f in rec.iterdir()) < 20_000  # small enough to commit
    logged = runlog.read_jsonl(os.path.join(out, "metrics.jsonl"))  # steps.jsonl: the log's curves, rounded
    steps = runlog.read_jsonl(rec / "steps.jsonl")
    assert [(r["step"], r["model"]) for r in steps] == [(r["step"], r["model"]) for r in logged] and len(steps) == 4
    for row, log in zip(steps, logged):
        assert row["admitted"] == log["admitted"] and row["all_fail_share"] == pytest.approx(log["all_fail_share"], abs=5e-5)
        assert row["families"]["add"]["all_fail"] == pytest.approx(log["families"]["add"]["all_fail"], abs=5e-5)
        assert "s_values" not in row
    for name in ("config.json", "summary.json"):
        assert runlog.read_json(rec / name) == runlog.read_json(os.path.join(out, name))
    assert runlog.read_json(rec / "exchange.json") == json.loads(json.dumps(reproduce.exchange_stats(out)))
    greedy = runlog.read_json(rec / "greedy.json")  # the warm-start and the last checkpoint, per model
    assert greedy["a"]["start"]["add"] == {"0": 0.5} and greedy["a"]["end"]["add"] == {"0": 2.5}
    assert reproduce.recorded_greedy(str(records), {"grpo": [], "graft": [0]})["graft"]["b"]["end"]["mul"] == {0: 0.25}
    # the folder is gone (a new session): the record stands for the run, which is not run again, except that
    # seed 0's GRPO (n) and GRAFT folders draw the plots and GRPO's log feeds the stored run
    shutil.rmtree(root)
    reproduce.check_reuse(jobs, str(records))  # same settings: no error
    todo = reproduce.still_to_run(jobs, str(records), first_seed=0)
    assert [os.path.relpath(o, root) for _, _, o in todo] == [
        "seed0/grpo", "seed0/graft", "seed0/stored_a", "seed1/grpo", "seed1/graft", "seed1/stored_a"]
    todo = reproduce.still_to_run(jobs, str(records), first_seed=1)  # seed 0: only GRPO, for the stored run
    assert [os.path.relpath(o, root) for _, _, o in todo][:2] == ["seed0/grpo", "seed0/stored_a"]
    # a record made with other settings is refused by name, as a folder is
    other = reproduce.jobs_for(["graft"], [0], flags[:1] + ["3"] + flags[2:], str(root))
    with pytest.raises(SystemExit, match="steps: saved 2, now 3"):
        reproduce.check_reuse(other, str(records))


def test_run_jobs_records_each_run_and_starts_a_stored_run_after_its_grpo_run(monkeypatch, tmp_path, request):
    order, recorded, submitted = [], [], []
    def run_job(job):  # as a run does, it sets its thread count (--threads)
        torch.set_num_threads(1)
        order.append(os.path.relpath(job[2], tmp_path))
    monkeypatch.setattr(reproduce, "run_one", run_job)
    request.addfinalizer(lambda threads=torch.get_num_threads(): torch.set_num_threads(threads))  # even on a failure,
    torch.set_num_threads(2)  # and after the two-worker part below, whose fake runs set 1 thread in this process

    class Pool:  # two workers' pool, each job run at once, in this process, in submission order
        def __init__(self, workers, **kw):
            assert workers == 2

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def submit(self, fn, job):
            from concurrent.futures import Future
            submitted.append(os.path.relpath(job[2], tmp_path))
            f = Future()
            f.set_result(fn(job))
            return f
    monkeypatch.setattr(reproduce, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(reproduce, "record_run", lambda job, records: recorded.append(os.path.relpath(job[2], tmp_path)))
    jobs = reproduce.jobs_for(["stored_a", "grpo_4n", "grpo"], [0], ["--steps", "1"], str(tmp_path))
    reproduce.run_jobs(jobs, 1, str(tmp_path / "records"))  # one worker: in this process, no pool
    assert submitted == [] and order == ["seed0/grpo_4n", "seed0/grpo", "seed0/stored_a"]  # stored: after its peer
    assert recorded == order and torch.get_num_threads() == 2  # this process's own thread count kept
    # two workers: the first two go together, the stored run only once its GRPO (n) run has ended
    order.clear(), recorded.clear()
    kept = []
    reproduce.run_jobs(jobs, 2, str(tmp_path / "records"), record=lambda job, records: kept.append(job[2]))
    assert submitted == order == ["seed0/grpo_4n", "seed0/grpo", "seed0/stored_a"]
    assert recorded == [] and sorted(kept) == sorted(out for _, _, out in jobs)  # the record function given


def test_reproduce_refuses_to_mix_runs_of_different_stacks_and_names_the_folders(tmp_path):
    start = {"a": {"add": 0.1, "mul": 0.5}, "b": {"add": 0.7, "mul": 0.05}}
    root = tmp_path / "runs"
    for seed, transformers_version in ((0, "5.25.0"), (1, "5.17.0")):
        summary = {**_summary(start, start, (0.8, 0.6), (0.1, 0.2)), "stack": {"transformers": transformers_version}}
        runlog.write_json(str(root / f"seed{seed}" / "grpo" / "summary.json"), summary)
    with pytest.raises(SystemExit) as e:
        reproduce.collect(str(root), {"grpo": [0, 1]})
    message = str(e.value)
    assert "different software stacks" in message
    for seed, version in ((0, "5.25.0"), (1, "5.17.0")):
        line = next(x for x in message.splitlines() if version in x)
        assert line.endswith(os.path.join(str(root), f"seed{seed}", "grpo"))
    table, _ = reproduce.collect(str(root), {"grpo": [0]})  # one stack: one table
    assert table["grpo"]["a"]["add"] == {0: 0.1}


def test_main_job_table_shows_start_end_and_first_last(capsys):
    start = {"a": {"add": 0.10, "mul": 0.50}, "b": {"add": 0.70, "mul": 0.05}}
    end = {m: {f: v + 0.1 for f, v in fams.items()} for m, fams in start.items()}
    results = {}
    for method in ("grpo", "graft"):
        results[method] = _summary(start, end, (0.8, 0.6), (0.1, 0.25))
        for m in "ab":
            results[method]["models"][m]["mean_w"] = 0.9 if method == "graft" else None
    runlog.print_table(results)
    out = capsys.readouterr().out.splitlines()
    assert out[out.index("model  add start   add GRPO  add GRAFT  mul start   mul GRPO  mul GRAFT") + 1] == \
        "a          0.100      0.200      0.200      0.500      0.600      0.600"
    assert "a      grpo    0.100 -> 0.250   0.100 -> 0.250   0.800 -> 0.600   0.800 -> 0.600" in out
    assert any(line.split() == ["b", "graft", "10", "60", "0.900", "0.0010", "0.0020", "60"] for line in out)


def test_update_between_markers_replaces_only_the_marked_part(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- experiments/reproduce.py: tables -->\nold\n<!-- experiments/reproduce.py: end tables -->\nrest\n")
    assert reproduce.update_between_markers(str(doc), "tables", "| new |\n")
    assert doc.read_text() == "intro\n<!-- experiments/reproduce.py: tables -->\n| new |\n<!-- experiments/reproduce.py: end tables -->\nrest\n"
    assert not reproduce.update_between_markers(str(doc), "headline", "x")  # no such markers: untouched
    assert not reproduce.update_between_markers(str(tmp_path / "missing.md"), "tables", "x")


def weight_sum(model):
    return round(float(sum(p.detach().double().sum() for p in model.parameters())), 6)


def test_greedy_evals_score_the_warm_start_once_and_each_runs_last_checkpoint(model_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": model_dirs[0], "b": model_dirs[1]})
    calls = []

    def fingerprint(pol, heldout, cfg, step):  # stands in for the evaluation: which weights, how sampled
        calls.append((pol.name, step, cfg.eval_temperature, cfg.eval_samples))
        return {"add": weight_sum(pol.model), "mul": -weight_sum(pol.model)}
    monkeypatch.setattr(graft_min, "evaluate", fingerprint)
    jobs = reproduce.jobs_for(["grpo", "graft"], [0], ["--steps", "3", "--eval-problems", "2"], str(tmp_path))
    start = {}
    for k, (cfg, _, out) in enumerate(jobs):  # a last checkpoint whose weights are the start's + k + 1
        models = {}
        for m in "ab":
            model, _ = pairs.load_policy(model_dirs["ab".index(m)])
            start[m] = weight_sum(model)
            models[m] = {n: t + (k + 1) if t.is_floating_point() else t for n, t in model.state_dict().items()}
        os.makedirs(out)
        runlog.save_checkpoint(os.path.join(out, "checkpoint.pt"), {"next_step": 3, "models": models})
    got = reproduce.greedy_evals(jobs)
    assert {c[2:] for c in calls} == {(reproduce.GREEDY_T, 1)}
    assert sorted(c[:2] for c in calls) == sorted([("a", 0), ("b", 0)] + [(m, 3) for m in "ab"] * 2)  # start once
    for k, variant in enumerate(("grpo", "graft")):
        for m in "ab":
            n_weights = sum(p.numel() for p in pairs.load_policy(model_dirs["ab".index(m)])[0].parameters())
            assert got[variant][m]["start"]["add"] == {0: start[m]}
            assert got[variant][m]["end"]["add"][0] == pytest.approx(start[m] + (k + 1) * n_weights, rel=1e-9)
    runlog.save_checkpoint(os.path.join(jobs[1][2], "checkpoint.pt"), {"next_step": 2, "models": models})
    with pytest.raises(SystemExit, match="stopped at step 2 of 3"):
        reproduce.greedy_evals(jobs)


@pytest.mark.parametrize("argv, workers", [(["--pair", "tiny"], 2), (["--pair", "tiny", "--device", "cuda"], 1),
                                           (["--pair", "cpu"], 1), (["--pair", "small", "--device", "cpu"], 1)])
def test_the_main_job_runs_real_models_one_at_a_time(argv, workers, monkeypatch, tmp_path):
    """Two tiny runs go side by side on two cores; a real pair's runs go one after the other (one GPU, or a
    CPU's memory: a `--pair cpu` run peaks at ~17 GB), stopped here before anything loads."""
    from machinery import settings

    class Stop(Exception):
        pass

    seen = []

    def stop(jobs, n):
        seen.append((len(jobs), n))
        raise Stop

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": "A", "b": "B"})
    monkeypatch.setattr(runner, "run_parallel", lambda jobs, n, run: stop(jobs, n))
    with pytest.raises(Stop):
        runner.compare(settings.parse_args([*argv, "--out", str(tmp_path)]), graft_min.run)
    assert seen == [(2, workers)]


def test_a_checkpoint_that_cannot_be_written_stops_the_run_and_keeps_the_previous_one(model_dirs, tmp_path,
                                                                                       monkeypatch, caplog):
    out = tmp_path / "full-disk"
    real_save, calls = torch.save, []

    def save_then_fill_the_disk(obj, f):  # the second checkpoint: some bytes, then the disk is full
        calls.append(1)
        if len(calls) == 2:
            f.write(b"PK" * 1000)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        real_save(obj, f)
    monkeypatch.setattr(runlog.torch, "save", save_then_fill_the_disk)
    with caplog.at_level("INFO", logger="graft_min"):
        with pytest.raises(runlog.CheckpointNotWritten) as e:
            run(model_dirs, out, "--method", "grpo", "--steps", "3")
    assert f"{out / 'checkpoint.pt'}: cannot write the checkpoint" in str(e.value)
    assert "the previous checkpoint" in str(e.value) and "is intact" in str(e.value) and "--resume" in str(e.value)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["next_step"] == 1  # the first one, whole
    assert not [f for f in os.listdir(out) if f.startswith(".tmp-")]  # the partial file is gone
    said = [r.getMessage() for r in caplog.records if "each checkpoint.pt will hold" in r.getMessage()]
    assert len(said) == 1  # announced once, before the first checkpoint


def test_the_announced_checkpoint_size_is_the_written_size(model_dirs, tmp_path, caplog):
    out = tmp_path / "sized"
    with caplog.at_level("INFO", logger="graft_min"):
        run(model_dirs, out, "--method", "grpo", "--steps", "1")
    models = [pairs.load_policy(d)[0] for d in model_dirs]
    cfg = settings.parse_args(["--prompts-per-step", "6", "--n", "4"])
    announced = runlog.announce_checkpoints(str(out), models, cfg) * 1e9  # bytes
    written = os.path.getsize(out / "checkpoint.pt")
    assert announced <= written <= announced * 1.2 + 200_000  # + pickling, names and optimizer bookkeeping


def test_graft_takes_the_step0_evaluation_of_grpo_from_the_same_start_and_equals_a_fresh_one(model_dirs, tmp_path,
                                                                                            monkeypatch):
    """compare, one run after the other: GRAFT's start is GRPO's (the same weights, seeds and sizes), so GRAFT copies
    GRPO's step-0 evaluation instead of sampling it again; the copy equals the record of a GRAFT run that evaluates."""
    run(model_dirs, tmp_path / "grpo", "--method", "grpo", "--steps", "1")
    fresh = run(model_dirs, tmp_path / "fresh", "--method", "graft", "--steps", "1")
    evaluated, real = [], graft_min.evaluate
    monkeypatch.setattr(graft_min, "evaluate", lambda pol, heldout, cfg, step: evaluated.append((pol.name, step))
                        or real(pol, heldout, cfg, step))
    cfg = settings.parse_args(["--prompts-per-step", "6", "--n", "4", "--max-new-tokens", "6", "--lr", "1e-3",
                               "--eval-problems", "2", "--eval-samples", "1", "--ckpt-every", "1", "--eval-every", "1",
                               "--model-a", model_dirs[0], "--model-b", model_dirs[1], "--steps", "1"])
    copied = graft_min.run(cfg, "graft", str(tmp_path / "graft"), like=str(tmp_path / "grpo"))
    assert evaluated == [("a", 1), ("b", 1)]  # step 0 taken from GRPO's folder, step 1 evaluated
    read = runlog.read_jsonl
    assert read(tmp_path / "graft" / "evals.jsonl") == read(tmp_path / "fresh" / "evals.jsonl")
    assert [e for e in read(tmp_path / "graft" / "evals.jsonl") if e["step"] == 0] == \
        [e for e in read(tmp_path / "grpo" / "evals.jsonl") if e["step"] == 0]
    assert copied["models"] == fresh["models"]
    # another start (seed 1): nothing to copy, GRAFT evaluates its own step 0
    evaluated.clear()
    other = argparse.Namespace(**{**vars(cfg), "seed": 1})
    graft_min.run(other, "graft", str(tmp_path / "seed1"), like=str(tmp_path / "grpo"))
    assert evaluated == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
