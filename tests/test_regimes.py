"""experiments/regimes.py on tiny random models: a grid point's numbers are what its run folders say, a finished point is
kept in results/regimes/<point>.json and reused without its run folders, and only with the same settings; an
unfinished point's finished runs are recorded (results/regimes/<point>/) and not run again by a later session."""

import glob
import json
import os
import shutil
import zlib

import pytest

import graft_min
from machinery import settings
from experiments import regimes, reproduce

QUICK = "--prompts-per-step 4 --n 2 --max-new-tokens 6 --eval-problems 3 --eval-samples 1 --ckpt-every 2"


def fake_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


def evals_at(folder, model, step):
    with open(os.path.join(folder, "evals.jsonl")) as f:
        return next(e for e in map(json.loads, f) if e["model"] == model and e["step"] == step)


def test_a_grid_point_reports_its_runs_and_is_reused_without_them(model_dirs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": model_dirs[0], "b": model_dirs[1]})
    monkeypatch.setattr(graft_min, "reward", fake_reward)
    root, res = tmp_path / "runs", tmp_path / "results"
    argv = ["--weak-habits", "0.9", "--narrate", "off", "--seeds", "0", "1", "--steps", "2", "--eval-every", "1",
            "--root", str(root), "--results", str(res), "--jobs", "1", "--run-flags", QUICK]
    regimes.main(argv)
    saved = json.loads((res / "regimes" / "habit0.9_terse.json").read_text())
    assert saved["key"]["seeds"] == [0, 1] and "--world-split" in saved["key"]["flags"]
    assert saved["key"]["stack"] == settings.software_stack("cpu")  # the versions and CPU capability that made it
    # each seed its own pair: pair k of the point's world (tiny_world.pair_specs), keys recorded
    world = ["--pair", "tiny", "--weak-habit", "0.9", "--world-split"]
    assert saved["key"]["pairs"] == [[s.key() for s in settings.tiny_specs(settings.parse_args(world + ["--seed", k]))]
                                     for k in ("0", "1")]
    assert saved["key"]["pairs"][0] != saved["key"]["pairs"][1]
    point = saved["result"]
    assert (point["a"]["weak"], point["b"]["weak"]) == ("addc", "mulc")  # pair_specs' weak sub-skills
    run = lambda s, v: str(root / "habit0.9_terse" / f"seed{s}" / v)
    for m, weak in (("a", "addc"), ("b", "mulc")):  # the deltas, read again from the evaluations
        for key, variant, step in (("graft_first", "graft", 1), ("grpo2n_end", "grpo_2n", 2), ("graft_end", "graft", 2)):
            want = [evals_at(run(s, variant), m, step)[weak] - evals_at(run(s, "grpo"), m, step)[weak] for s in (0, 1)]
            assert point[m][key] == pytest.approx(want)
        assert point[m]["start"] == pytest.approx(sum(evals_at(run(s, "grpo"), m, 0)[weak] for s in (0, 1)) / 2)
    table = capsys.readouterr().out
    assert "| habit0.9_terse | A (addc) |" in table and "1 of 1 points" in table
    assert (res / "regimes.png").is_file()

    records = res / "regimes" / "habit0.9_terse"  # each run's record, the exchange statistics of GRAFT's too
    assert sorted(p.relative_to(records).as_posix() for p in records.rglob("summary.json")) == [
        f"seed{s}/{v}/summary.json" for s in (0, 1) for v in ("graft", "grpo", "grpo_2n")]
    assert (records / "seed1" / "graft" / "exchange.json").is_file()

    # the run folders gone, the point is reused from its JSON file, nothing runs
    monkeypatch.setattr(reproduce, "run_jobs", lambda *a, **kw: pytest.fail("ran again"))
    os.rename(root, tmp_path / "moved")
    regimes.main(argv + ["--report"])
    assert "| habit0.9_terse | A (addc) |" in capsys.readouterr().out
    # other settings: the saved point does not stand for them
    with pytest.raises(SystemExit, match="no grid point has finished yet"):
        regimes.main(argv[:5] + ["0", "2"] + argv[7:] + ["--report"])  # --seeds 0 2
    # another stack (here another transformers): the saved point does not stand for this one either
    saved["key"]["stack"]["transformers"] = "4.0.0"
    (res / "regimes" / "habit0.9_terse.json").write_text(json.dumps(saved))
    with pytest.raises(SystemExit, match="no grid point has finished yet"):
        regimes.main(argv + ["--report"])


def test_a_stopped_point_keeps_its_wall_time_for_the_resumed_one(model_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": model_dirs[0], "b": model_dirs[1]})

    def stopped(*a, **kw):
        raise KeyboardInterrupt  # as Ctrl-C would stop the runs (a SIGKILL leaves no time to write anything)

    monkeypatch.setattr(reproduce, "run_jobs", stopped)
    argv = ["--weak-habits", "1.0", "--narrate", "off", "--seeds", "0", "--steps", "2", "--eval-every", "1",
            "--root", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--jobs", "1", "--run-flags", QUICK]

    def stop_and_read_wall():
        with pytest.raises(KeyboardInterrupt):
            regimes.main(argv)
        return json.loads((tmp_path / "results" / "regimes" / "habit1_terse" / "wall.json").read_text())["seconds"]

    first, second = stop_and_read_wall(), stop_and_read_wall()
    assert 0 < first < second  # the second stop adds to the first, not replaces it


def test_a_point_cut_short_keeps_its_finished_runs_for_a_later_session(model_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": model_dirs[0], "b": model_dirs[1]})
    monkeypatch.setattr(graft_min, "reward", fake_reward)
    run_jobs, ran, walls = reproduce.run_jobs, [], []

    def two_then_stop(jobs, workers, records, record=None, desc=None):  # the session ends after two runs
        ran.append([os.path.basename(os.path.dirname(out)) + "/" + os.path.basename(out) for _, _, out in jobs])
        run_jobs(jobs[:2], workers, records, record)
        walls.append(json.loads(open(os.path.join(records, "wall.json")).read())["seconds"])  # kept as each run ends
        raise KeyboardInterrupt

    monkeypatch.setattr(reproduce, "run_jobs", two_then_stop)
    root, res = tmp_path / "runs", tmp_path / "results"
    argv = ["--weak-habits", "0.9", "--narrate", "off", "--seeds", "0", "1", "--steps", "2", "--eval-every", "1",
            "--root", str(root), "--results", str(res), "--jobs", "1", "--run-flags", QUICK]
    with pytest.raises(KeyboardInterrupt):
        regimes.main(argv)
    assert not (res / "regimes" / "habit0.9_terse.json").exists() and walls[0] > 0
    shutil.rmtree(root)  # a new session: the run folders are gone, the records (committed) are there

    def the_rest(jobs, workers, records, record=None, desc=None):
        ran.append([os.path.basename(os.path.dirname(out)) + "/" + os.path.basename(out) for _, _, out in jobs])
        run_jobs(jobs, workers, records, record)

    monkeypatch.setattr(reproduce, "run_jobs", the_rest)
    regimes.main(argv)
    every = [f"seed{s}/{v}" for s in (0, 1) for v in ("grpo_2n", "grpo", "graft")]
    assert ran == [every, every[2:]]  # the two recorded runs were not run again
    point = json.loads((res / "regimes" / "habit0.9_terse.json").read_text())["result"]
    run = lambda s, v: str(res / "regimes" / "habit0.9_terse" / f"seed{s}" / v)
    for m, weak in (("a", "addc"), ("b", "mulc")):  # seed 0's GRPO (2n) from the first session, GRPO (n) the second
        want = [evals_at(run(s, "grpo_2n"), m, 2)[weak] - evals_at(run(s, "grpo"), m, 2)[weak] for s in (0, 1)]
        assert point[m]["grpo2n_end"] == pytest.approx(want)


def test_each_committed_point_is_what_its_committed_run_records_say():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    points = [p for p in glob.glob(os.path.join(here, "results", "**", "regimes", "*.json"), recursive=True)
              if os.path.isdir(p[:-len(".json")])]
    assert points  # the map's points since run records (issue 48's rerun on pairs-as-seeds)
    for path in points:
        saved = json.loads(open(path).read())
        seeds, flags = saved["key"]["seeds"], saved["key"]["flags"]
        steps, every = (int(flags[flags.index(f) + 1]) for f in ("--steps", "--eval-every"))
        again = json.loads(json.dumps(regimes.point_result(path[:-len(".json")], seeds, every, steps)))
        assert again == saved["result"], path
        for seed, pair in zip(seeds, saved["key"]["pairs"]):  # each seed's runs on its own pair, as the key says
            for variant in regimes.VARIANTS:
                config = json.loads(open(os.path.join(path[:-len(".json")], f"seed{seed}", variant, "config.json")).read())
                paths = [os.path.basename(config["model_paths"][m]) for m in "ab"]
                assert config["seed"] == seed and paths == pair, (path, seed, variant)
