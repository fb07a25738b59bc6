"""bench/bench_trl.py at its toy size: TRL's GRPOTrainer and our GRPO step on the tiny Llama, each side in its own
process, and our phases against their bare loops (the real measurement is results/trl_bench.txt)."""

import json
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import bench_trl  # noqa: E402
from machinery import pairs  # noqa: E402


def test_toy_bench_times_both_sides_and_the_bare_loops(tmp_path, capsys, tiny_pair_ready, monkeypatch):
    out, keep = tmp_path / "bench.json", tmp_path / "sides"
    bench_trl.main(["--toy", "--steps", "1", "--threads", "1", "--json", str(out), "--keep", str(keep)])
    printed = capsys.readouterr().out
    assert "TRL GRPOTrainer" in printed and "graft-min --method grpo" in printed and "ours / TRL" in printed
    res = json.loads(out.read_text())
    for side in ("trl", "ours"):
        steps = res[side]["steps"]
        assert len(steps) == 2  # the warm-up and one timed step
        for s in steps:
            # 2 prompts x 4 responses of at most 8 tokens (a response ends at its first stop id, which counts)
            assert 8 <= s["response_tokens"] <= 2 * 4 * 8 and 1 <= s["decode_steps"] <= 8
            assert s["generate"] > 0 and s["score"] > 0 and s["update"] > 0
            assert s["total"] >= s["generate"] + s["score"] + s["reward"]  # the phases lie inside the step
    for phase in ("generate", "score", "update"):  # each bare loop run --steps times, its median reported
        bare = res["bare"][phase]
        assert len(bare["runs"]) == 1 and bare["seconds"] == bare["runs"][0] > 0 and bare["gflops"] > 0
    model, _ = pairs.load_policy(tiny_pair_ready[0])
    assert res["bare"]["params"] == sum(p.numel() for p in model.parameters())  # tiny model A's

    # resumable: finished sides are kept; the same settings reuse them all, no process is started
    def no_run(*a, **kw):
        raise AssertionError("a kept side was measured again")

    monkeypatch.setattr(bench_trl.subprocess, "run", no_run)
    again = bench_trl.main(["--toy", "--steps", "1", "--threads", "1", "--keep", str(keep)])
    assert again["ours"]["steps"] == res["ours"]["steps"] and again["trl"]["steps"] == res["trl"]["steps"]
    (keep / "ours.json").unlink()  # ours measured again: its bare loops (which replay it) must be too
    ran = []
    monkeypatch.setattr(bench_trl.subprocess, "run", lambda cmd, check: ran.append(cmd[cmd.index("--side") + 1])
                        or (keep / f"{ran[-1]}.json").write_text(json.dumps(res[ran[-1]])))
    bench_trl.main(["--toy", "--steps", "1", "--threads", "1", "--keep", str(keep)])
    assert ran == ["ours", "bare"]
    ran.clear()  # a bare side kept from before its loops were repeated (one run each) is measured anew
    kept = json.loads((keep / "bare.json").read_text())
    kept["settings"].pop("bare_loops")
    (keep / "bare.json").write_text(json.dumps(kept))
    bench_trl.main(["--toy", "--steps", "1", "--threads", "1", "--keep", str(keep)])
    assert ran == ["bare"]
    ran.clear()  # a side kept for one --model is not another model's measurement
    bench_trl.main(["--toy", "--steps", "1", "--threads", "1", "--keep", str(keep), "--model", "qwen-coder"])
    assert ran == ["trl", "ours", "bare"]


def test_a_missing_trl_internal_names_the_version(monkeypatch):
    trainer = types.SimpleNamespace()  # a GRPOTrainer without the private method the bench times
    with pytest.raises(SystemExit, match=r"no GRPOTrainer._generate_single_turn; this bench was written for trl 1\.16\.0"):
        bench_trl.trl_internal(trainer, "_generate_single_turn")


def test_minibatches_must_divide_the_responses():
    with pytest.raises(SystemExit):
        bench_trl.parse(["--prompts", "3", "--n", "3", "--minibatches", "2"])


def test_model_is_one_of_the_fetched_ones(capsys):
    assert bench_trl.parse([]).model == "smollm2"
    with pytest.raises(SystemExit):
        bench_trl.parse(["--model", "llama-70b"])
    assert "invalid choice: 'llama-70b'" in capsys.readouterr().err
