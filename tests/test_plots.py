"""machinery/plots.py renders every plot from a small synthetic run folder (and a comparison folder)."""

import json
import os
import random

from machinery import plots, runlog


def write_run(folder, exchange=True, steps=6, n=4):
    rng = random.Random(0)
    os.makedirs(folder, exist_ok=True)
    runlog.write_json(os.path.join(folder, "config.json"), {"n": n, "delta": 0.8})
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for step in range(steps):
            for model in "ab":
                s = [round(rng.uniform(0.3, 1.3), 3) for _ in range(n if exchange else 0)]
                f.write(json.dumps({
                    "step": step, "model": model, "peer_any_success_on_all_fail": rng.random(),
                    "peer_mixed_on_all_fail": rng.random() if step % 3 else None, "selected": len(s) // n,
                    "peer_responses": len(s), "admitted": sum(x > 0.8 for x in s), "s_values": s,
                    "clip_self": 0.01 * rng.random(), "clip_peer": 0.02 * rng.random() if s else 0.0,
                    "tokens_self": 100, "tokens_peer": 40 if s else 0, "entropy": rng.uniform(0.1, 0.5),
                    "families": {f: {"reward": rng.random(), "all_fail": rng.random()} for f in ("add", "mul")}}) + "\n")
    with open(os.path.join(folder, "trajectories.jsonl"), "w") as f:
        for step in range(steps):
            for q in range(3):
                for model in "ab":
                    f.write(json.dumps({"step": step, "model": model, "prompt_id": f"p{q}",
                                        "rewards": [float(rng.random() < 0.4) for _ in range(n)]}) + "\n")
    with open(os.path.join(folder, "evals.jsonl"), "w") as f:
        for step in (0, 3, 6):
            for model in "ab":
                f.write(json.dumps({"step": step, "model": model, "add": rng.random(), "mul": rng.random(),
                                    "mean": 0.5}) + "\n")


def _is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 5000


def test_every_plot_of_one_run(tmp_path):
    write_run(tmp_path / "run")
    written = plots.plot_runs([str(tmp_path / "run")])
    names = sorted(os.path.basename(p) for p in written)
    assert names == sorted(["accuracy.png", "training.png", "complementarity.png", "success_heatmap.png", "compatibility.png",
                            "clipping.png", "exchange.png"])
    assert all(_is_png(p) for p in written)


def test_comparison_folder_and_a_run_without_exchange(tmp_path):
    write_run(tmp_path / "cmp" / "grpo", exchange=False)
    write_run(tmp_path / "cmp" / "graft")
    written = plots.plot_runs([str(tmp_path / "cmp")])
    names = {os.path.basename(p) for p in written}
    assert "grpo_compatibility.png" not in names  # nothing was exchanged under GRPO
    assert {"accuracy.png", "training.png", "grpo_complementarity.png", "graft_compatibility.png", "graft_exchange.png"} <= names
    assert all(_is_png(p) for p in written)


def test_training_table_averages_each_block_of_steps():
    metrics = [{"step": s, "model": "a", "entropy": 0.5 + s, "selected": s, "reward_mean": (s / 10 + 0.5) / 2,
                "finished_share": s / 4,
                "families": {"add": {"reward": s / 10, "all_fail": 1 - s / 10}, "mul": {"reward": 0.5, "all_fail": 0.0}}}
               for s in range(4)]
    lines = plots.training_table(metrics, every=2)
    assert len(lines) == 3  # a header and two blocks
    assert lines[1].split() == ["0-1", "a", "0.050", "0.950", "0.500", "0.000", "0.275", "0.125", "1.000", "0.5"]
    assert lines[2].split() == ["2-3", "a", "0.250", "0.750", "0.500", "0.000", "0.375", "0.625", "3.000", "2.5"]
    del metrics[3]["finished_share"]  # an older run's record: no finished share in that block
    assert plots.training_table(metrics, every=2)[2].split()[7] == "-"


def test_eval_table_reads_finished_and_pass_among_finished():
    evals = [{"step": 0, "model": "a", "add": 0.25, "mul": 0.5, "mean": 0.375},  # an older run's record: skipped
             {"step": 8, "model": "a", "add": 0.25, "mul": 0.0, "mean": 0.125, "finished": {"add": 0.5, "mul": 0.0},
              "pass_finished": {"add": 0.5, "mul": None}}]  # 1 of 4 right, 2 of 4 finished; mul: none finished
    lines = plots.eval_table(evals)
    assert lines[0] == "| step | model | pass@1 (add / mul) | finished | pass@1 among finished |"
    assert lines[2:] == ["| 8 | a | 0.250 / 0.000 | 0.500 / 0.000 | 0.500 / - |"]
    assert plots.eval_table(evals[:1]) == []


def test_seed_bands_plot(tmp_path):
    runs = {label: {seed: [{"step": s, "model": m, "add": 0.1 * s + seed / 100, "mul": 0.5, "mean": 0.3}
                           for s in range(0, 50, 10) for m in "ab"] for seed in range(3)} for label in ("GRPO", "GRAFT")}
    path = str(tmp_path / "bands.png")
    plots.plot_seed_bands(runs, path)
    assert _is_png(path)
