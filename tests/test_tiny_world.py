"""Tests for machinery/tiny_world.py: the warm-start cache is reused, rebuilt when its spec changes, and a
corrupt cache is rebuilt with a warning instead of crashing inside transformers; the world's knobs; the shipped
pair (tiny_pair/: checked on load, refused when changed, rebuilt by `python -m machinery.tiny_world build`) and pairs as seeds."""

import dataclasses
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import another_machine
import rollout
from machinery import memory, pairs, tiny_world, wheels

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = tiny_world.TinySpec("test-cache", "llama", d_model=16, n_layer=1, n_head=2, mix={"mul": 0.5, "add": 0.5},
                      steps=2, batch=4, seed=0)


@pytest.fixture
def built(tmp_path):
    return tiny_world.ensure_tiny_model(SPEC, str(tmp_path)), tmp_path


def test_cache_is_reused(built, monkeypatch):
    path, cache = built
    assert os.path.isfile(os.path.join(path, "tiny_spec.json"))
    umask = os.umask(0)
    os.umask(umask)  # the folder and its files as mkdir() / open() leave them, not mkdtemp's 700 or safetensors' 600
    assert {name: os.stat(os.path.join(path, name)).st_mode & 0o777 for name in ("", "model.safetensors")} == {
        "": 0o777 & ~umask, "model.safetensors": 0o666 & ~umask}
    monkeypatch.setattr(tiny_world, "warm_start", lambda *a: pytest.fail("warm-started again despite a valid cache"))
    assert tiny_world.ensure_tiny_model(SPEC, str(cache)) == path
    model, tok = pairs.load_policy(path)
    assert tok.decode(tok.encode("Q:12*3=")) == "Q:12*3="
    assert model.config.model_type == "llama"


def test_changed_spec_builds_a_new_folder(built):
    path, cache = built
    other = tiny_world.TinySpec(**{**SPEC.__dict__, "lr": 1e-3})
    assert other.key() != SPEC.key()
    assert tiny_world.ensure_tiny_model(other, str(cache)) != path
    assert sorted(os.listdir(os.path.join(cache, "tiny"))) == sorted([SPEC.key(), other.key()])


@pytest.mark.parametrize("victim, garbage", [("model.safetensors", b"not a safetensors file"),
                                             ("config.json", b"{ broken"),
                                             ("tiny_spec.json", b"")])
def test_corrupt_cache_is_rebuilt_with_a_warning(built, victim, garbage, caplog):
    path, cache = built
    with open(os.path.join(path, victim), "wb") as f:
        f.write(garbage)
    with caplog.at_level(logging.WARNING, logger="graft_min"):
        again = tiny_world.ensure_tiny_model(SPEC, str(cache))
    assert again == path
    assert any("unusable" in r.message and path in r.message for r in caplog.records)
    pairs.load_policy(path)  # loads cleanly after the rebuild


def test_unfinished_build_leaves_no_cache(tmp_path, monkeypatch):
    def boom(*a):
        raise KeyboardInterrupt
    monkeypatch.setattr(tiny_world, "warm_start", boom)
    with pytest.raises(KeyboardInterrupt):
        tiny_world.ensure_tiny_model(SPEC, str(tmp_path))
    assert not os.path.exists(os.path.join(tmp_path, "tiny", SPEC.key()))


def test_unknown_arch_is_a_clear_error(char_tok_a):
    bad = tiny_world.TinySpec("x", "mamba", d_model=16, n_layer=1, n_head=2)
    with pytest.raises(ValueError, match="unknown arch 'mamba'"):
        tiny_world.build_tiny_model(bad, char_tok_a)


def test_world_report_counts_exact_habit_traces(model_dirs, monkeypatch):
    """A stand-in sampler whose first sample of each prompt is the family's habit trace and whose
    second is the correct solution: habit share 1/2, pass@1 from the verifier, no all-fail prompt
    unless a habit trace is also correct; the peer statistics are shares of the receiver's all-fail."""
    world = tiny_world.make_world()
    world = tiny_world.World(world.train, {f: ps[:3] for f, ps in world.heldout.items()})
    problems = [p for f in sorted(world.heldout) for p in world.heldout[f]]

    def fake_sample(model, tok, prompt_ids, n, *a, **k):
        texts = [t for p in problems for t in (p.habit, p.solution)]
        ids = [tok.encode(t) for t in texts]
        return rollout.Rollout(prompt_ids, ids, texts, [True] * len(texts), [torch.full((len(i),), -0.1) for i in ids], n)

    monkeypatch.setattr(rollout, "sample_groups", fake_sample)
    report = tiny_world.world_report(model_dirs, n=2, world=world)
    from verifier import reward
    for fam, ps in sorted(world.heldout.items()):
        v = report["models"]["a"][fam]
        hits = [reward(p.habit, p.answer) + 1 for p in ps]  # the solution always scores 1
        assert v["habit"] == pytest.approx(0.5)
        assert v["pass@1"] == pytest.approx(sum(hits) / (2 * len(ps)))
        assert v["all_fail"] == 0.0
    assert report["directions"]["a -> b"]["add"]["receiver_all_fail"] == 0


# ---------------------------------------------------------------- the world's knobs (split_carry, narrate)

def test_the_worlds_keep_their_cache_keys():
    """pair_specs() is the main job's world (split, weak habit 0.9: the regime map's habit0.9_terse point, whose
    warm-starts experiments/regimes.py and experiments/reproduce.py share); the earlier habit world of whole families keeps the keys it
    was cached under (knobs absent from the key at TinySpec's defaults); every knob moves the key."""
    assert tiny_world.pair_specs() == tiny_world.TINY == tiny_world.pair_specs(0.9, 0.25, split_carry=True)
    assert [s.key() for s in tiny_world.TINY] == ["tiny-a-llama-4a2aca6ba422", "tiny-b-gpt2-e8174788c5f7"]
    habit_world = tiny_world.pair_specs(0.85, split_carry=False)
    assert [s.key() for s in habit_world] == ["tiny-a-llama-f314f2f21001", "tiny-b-gpt2-5181a9ca57b6"]
    keys = {s.key() for s in tiny_world.TINY} | {s.key() for s in habit_world}
    for knobs in ({"split_carry": False}, {"narrate": True}, {"weak_habit": 1.0}, {"world_seed": 1}):
        assert not keys & {s.key() for s in tiny_world.pair_specs(**knobs)}, knobs


def test_split_carry_sorts_each_problem_by_its_units_carry():
    whole, split = tiny_world.make_world(), tiny_world.make_world(split_carry=True)
    assert sorted(split.train) == ["add", "addc", "mul", "mulc"]
    for fam, carries in (("add", lambda a, b: a % 10 + b % 10 >= 10), ("mul", lambda a, b: (a % 10) * b >= 10)):
        op = "+" if fam == "add" else "*"
        for sub, want in ((fam, False), (fam + "c", True)):
            ps = split.train[sub] + split.heldout[sub]
            assert ps and all(p.family == sub and p.id.startswith(sub + "/") for p in ps)
            assert all(carries(*map(int, p.question[2:-1].split(op))) == want for p in ps)
            assert not {p.id for p in split.train[sub]} & {p.id for p in split.heldout[sub]}
        # the same problems as the unsplit world, only sorted in two
        ids = lambda ps: sorted(p.id.split("/", 1)[1] for p in ps)
        assert ids(split.train[fam] + split.heldout[fam] + split.train[fam + "c"] + split.heldout[fam + "c"]) == \
            ids(whole.train[fam] + whole.heldout[fam])
    # mul without a units carry, a = 12..99 by units digit u and b = 2..9 with u * b < 10: u = 0 and 1 (8 values of a,
    # 8 of b), u = 2 (9 values of a; b = 2..4), u = 3 (b = 2, 3), u = 4 (b = 2): 182 problems, a third held out
    assert len(split.train["mul"]) + len(split.heldout["mul"]) == 8 * 8 + 8 * 8 + 9 * 3 + 9 * 2 + 9 * 1
    assert {f: len(split.heldout[f]) for f in split.heldout} == {"add": 200, "addc": 200, "mul": 60, "mulc": 174}


def test_the_habit_drops_exactly_the_units_carry_on_the_carrying_sub_family():
    split = tiny_world.make_world(split_carry=True)
    for p in split.train["addc"][:50] + split.train["mulc"][:50]:
        assert p.habit != p.solution and ",".join(p.habit.split(",")[:1]) == p.solution.split(",")[0]
        assert "+" not in p.habit.split(",")[1].split("=")[0][3:]  # the second column adds no carry
    for p in split.train["add"]:  # no units carry: the habit drops a later carry, if any
        assert p.habit.split(",")[0] == p.solution.split(",")[0]


def _trace_shares(spec, world, steps):
    """{family: (examples, share with the habit trace, share with the right one)} of warm_start_data."""
    counts = {}
    for probs, traces in itertools.islice(tiny_world.warm_start_data(spec, world), steps):
        for p, t in zip(probs, traces):
            c = counts.setdefault(p.family, [0, 0, 0])
            c[0] += 1
            c[1] += t == p.habit and t != p.solution
            c[2] += t == p.solution
    return {f: (c[0], c[1] / c[0], c[2] / c[0]) for f, c in counts.items()}


@pytest.mark.parametrize("weak", [1.0, 0.9])
def test_warm_start_data_teaches_the_habit_on_the_weak_sub_skill_only(weak):
    """A's teacher: the habit on `weak` of its addc traces, never on add, 25% on mul and mulc (where the
    habit changes the trace); B mirrored. A quarter of the examples per sub-family."""
    world = tiny_world.make_world(split_carry=True)
    spec_a, spec_b = tiny_world.pair_specs(weak_habit=weak, split_carry=True)
    assert (tiny_world.weak_family(spec_a), tiny_world.weak_family(spec_b)) == ("addc", "mulc")
    for spec, want in ((spec_a, {"addc": weak, "add": 0.0}), (spec_b, {"mulc": weak, "mul": 0.0})):
        shares = _trace_shares(spec, world, 300)  # 19,200 examples
        assert sorted(shares) == ["add", "addc", "mul", "mulc"]
        for fam, (count, habit, right) in shares.items():
            assert abs(count / 19200 - 0.25) < 0.015
            assert habit + right == pytest.approx(1.0)  # every trace is one of the two
            if fam in want:
                assert habit == pytest.approx(want[fam], abs=0.015) and (want[fam] not in (0.0, 1.0) or habit == want[fam])
            elif fam in ("addc", "mulc"):  # the peer's skill: the habit always changes a carrying trace
                assert habit == pytest.approx(0.25, abs=0.02)


def test_narrated_traces_are_longer_with_the_same_decisive_step():
    assert tiny_world.column_trace(658, 375, "+", narrate=True) == \
        ("8+5=13 so 3 carry 1,5+7+1=13 so 3 carry 1,6+3+1=10 so 0 carry 1 \\boxed{1033}", 1033)
    assert tiny_world.column_trace(658, 375, "+", True, narrate=True) == \
        ("8+5=13 so 3 carry 0,5+7=12 so 2 carry 1,6+3+1=10 so 0 carry 1 \\boxed{1023}", 1023)
    assert tiny_world.column_trace(47, 6, "*", narrate=True)[0] == "7*6=42 so 2 carry 4,4*6+4=28 so 8 carry 2 \\boxed{282}"
    terse, narrated = tiny_world.make_world(), tiny_world.make_world(narrate=True)
    for fam, ratio in (("add", 2.2), ("mul", 2.0)):
        short = sum(len(p.solution) for p in terse.train[fam]) / len(terse.train[fam])
        long = sum(len(p.solution) for p in narrated.train[fam]) / len(narrated.train[fam])
        assert long / short == pytest.approx(ratio, abs=0.2), (fam, short, long)
        assert [p.id for p in terse.train[fam]] == [p.id for p in narrated.train[fam]]  # the same problems
    chars = set(tiny_world.alphabet(narrate=True))
    assert all(set(p.solution + p.habit + p.question) <= chars for p in narrated.train["add"] + narrated.train["mul"])
    assert tiny_world.alphabet() == sorted(set("0123456789+*=,: Q\\boxed{}"))  # the terse world's, as cached


def test_the_command_line_sets_the_world_knobs(capsys):
    from machinery import settings

    cfg = settings.parse_args(["--world-split", "--weak-habit", "1.0", "--narrate"])
    assert settings.tiny_specs(cfg) == tiny_world.pair_specs(1.0, 0.25, split_carry=True, narrate=True)
    assert settings.tiny_specs(settings.parse_args([])) == tiny_world.TINY
    cfg_whole = settings.parse_args(["--no-world-split", "--weak-habit", "0.85"])
    assert settings.tiny_specs(cfg_whole) == tiny_world.pair_specs(0.85, split_carry=False)
    world_train, world_heldout = settings.load_data(cfg)
    assert sorted(world_heldout) == ["add", "addc", "mul", "mulc"]
    assert " so " in world_train[0].solution  # narrated traces
    with pytest.raises(SystemExit):
        settings.parse_args(["--weak-habit", "1.5"])
    assert "--weak-habit 1.5: a share of traces, give a number in [0, 1]" in capsys.readouterr().err


# ---------------------------------------------------------------- the shipped pair (tiny_pair/) and pairs as seeds

def test_the_shipped_files_are_the_manifests():
    """tiny_pair/ holds exactly the files MANIFEST.json lists, byte for byte (sha256 and size), for pairs 0-4 of the
    main job's world (pair 0 the main job's), with what made them: the CPU, its exact kind, the stack, the threads
    and the command."""
    manifest = tiny_world.read_manifest()
    assert {(m["pair"], m["model"]): k for k, m in manifest["models"].items()} == {
        (k, m): spec.key() for k in range(5) for m, spec in zip("ab", tiny_world.pair_specs(pair_seed=k))}
    assert [s.key() for s in tiny_world.TINY] == [k for k, m in manifest["models"].items() if m["pair"] == 0]
    assert manifest["command"] == "python -m machinery.tiny_world build" and manifest["threads"] == 1
    assert manifest["machine"] and manifest["cpu"] and manifest["stack"]["cpu_capability"]
    assert sorted(os.listdir(tiny_world.SHIPPED)) == sorted(["MANIFEST.json", *manifest["models"]])
    for key, entry in manifest["models"].items():
        folder = os.path.join(tiny_world.SHIPPED, key)
        assert sorted(os.listdir(folder)) == sorted(entry["files"]) == [
            "config.json", "generation_config.json", "model.safetensors", "tiny_spec.json", "tokenizer.json",
            "tokenizer_config.json"]
        for name, want in entry["files"].items():
            path = os.path.join(folder, name)
            assert (wheels.sha256_of(path), os.path.getsize(path)) == (want["sha256"], want["size"]), path
        with open(os.path.join(folder, "tiny_spec.json")) as f:
            assert json.load(f)["key"] == key


def test_the_main_jobs_pair_is_the_shipped_one_with_no_warm_start(tmp_path, monkeypatch):
    """settings.model_paths and tiny_pair give the shipped folders for the main job's specs: no warm-start (it would
    fail here) and nothing written to the cache."""
    from machinery import settings

    monkeypatch.setattr(tiny_world, "warm_start", lambda *a: pytest.fail("warm-started the shipped pair"))
    monkeypatch.setattr(tiny_world, "ensure_tiny_model", lambda *a: pytest.fail("built the shipped pair"))
    shipped = [os.path.join(tiny_world.SHIPPED, s.key()) for s in tiny_world.TINY]
    assert tiny_world.tiny_pair(str(tmp_path)) == shipped
    cfg = settings.parse_args(["--pair", "tiny", "--cache-dir", str(tmp_path)])
    assert settings.model_paths(cfg) == dict(zip("ab", shipped))
    # config.json records them as tiny_pair/<key>, the same in every clone (experiments/reproduce.py reuses records across them)
    assert settings.recorded_path(shipped[0]) == os.path.join("tiny_pair", tiny_world.TINY[0].key())
    assert settings.recorded_path(str(tmp_path / "x")) == str(tmp_path / "x")
    assert os.listdir(tmp_path) == []  # no cache written
    model, tok = pairs.load_policy(shipped[0])
    assert model.config.model_type == "llama" and tok.decode(tok.encode("Q:47*6=")) == "Q:47*6="


def test_a_changed_shipped_file_is_refused_by_name(tmp_path, monkeypatch):
    """One byte of A's weights changed in a copy of tiny_pair/: refused naming the file, both sha256s and the fix,
    with no warm-start in its place; a missing file and an extra one are refused too."""
    monkeypatch.setattr(tiny_world, "warm_start", lambda *a: pytest.fail("warm-started instead of refusing"))
    copy = tmp_path / "tiny_pair"
    shutil.copytree(tiny_world.SHIPPED, copy)
    key = tiny_world.TINY[0].key()
    weights = copy / key / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one weight
    weights.write_bytes(bytes(data))
    want = tiny_world.read_manifest()["models"][key]["files"]["model.safetensors"]["sha256"]
    with pytest.raises(wheels.ChecksumMismatch) as e:
        tiny_world.tiny_pair(str(tmp_path / "cache"), shipped=str(copy))
    message = str(e.value)
    assert message.startswith(f"{weights}: sha256 {wheels.sha256_of(weights)}, expected {want} ")
    assert "git checkout -- tiny_pair" in message and "python -m machinery.tiny_world build" in message
    assert not (tmp_path / "cache").exists()

    shutil.copy(os.path.join(tiny_world.SHIPPED, key, "model.safetensors"), weights)  # restored: accepted again
    assert tiny_world.tiny_pair(str(tmp_path / "cache"), shipped=str(copy))[0] == str(copy / key)
    os.remove(copy / key / "tokenizer.json")
    with pytest.raises(wheels.ChecksumMismatch, match=r"tokenizer.json: sha256 nothing \(the file is missing\), expected"):
        tiny_world.shipped_model(tiny_world.TINY[0], str(copy))
    shutil.copy(os.path.join(tiny_world.SHIPPED, key, "tokenizer.json"), copy / key)
    (copy / key / "vocab.txt").write_text("0\n")
    with pytest.raises(wheels.ChecksumMismatch, match="vocab.txt: not a file of the shipped pair"):
        tiny_world.shipped_model(tiny_world.TINY[0], str(copy))


def test_pair_seed_k_is_its_own_pair_in_the_same_world_with_the_same_tokenizers():
    """Pair 0 is TINY (the shipped keys); pairs 1 and 2 differ from it and from each other only in each model's init
    and warm-start data order (TinySpec.seed 1 + 2k and 2 + 2k), never in the world or the tokenizers; --seed k is
    pair k; pairs 0-4 are shipped, pair 5 and another world's pairs are not."""
    from machinery import settings

    pairs_by_seed = {k: tiny_world.pair_specs(pair_seed=k) for k in (0, 1, 2)}
    assert pairs_by_seed[0] == tiny_world.TINY
    assert [s.key() for s in pairs_by_seed[0]] == ["tiny-a-llama-4a2aca6ba422", "tiny-b-gpt2-e8174788c5f7"]
    keys = [s.key() for k in (0, 1, 2) for s in pairs_by_seed[k]]
    assert len(set(keys)) == 6
    for k, (a, b) in pairs_by_seed.items():
        assert (a.seed, b.seed) == (1 + 2 * k, 2 + 2 * k)
        assert (a.tokenizer_seed, b.tokenizer_seed, a.world_seed, b.world_seed) == (1, 2, 0, 0)
        for spec, first in zip((a, b), tiny_world.TINY):
            assert dataclasses.replace(spec, seed=first.seed) == first  # nothing else moved
            assert tiny_world.tiny_tokenizer(spec).get_vocab() == tiny_world.tiny_tokenizer(first).get_vocab()
        assert tiny_world.shipped_model(a) == os.path.join(tiny_world.SHIPPED, a.key())
    assert tiny_world.shipped_model(tiny_world.pair_specs(pair_seed=5)[0]) is None
    assert tiny_world.shipped_model(tiny_world.pair_specs(0.75)[1]) is None
    assert settings.tiny_specs(settings.parse_args(["--seed", "3"])) == tiny_world.pair_specs(pair_seed=3)
    assert [s.seed for s in settings.tiny_specs(settings.parse_args(["--seed", "3"]))] == [7, 8]
    # another world's pair k: the world knobs and the seed together
    cfg = settings.parse_args(["--weak-habit", "0.75", "--narrate", "--seed", "2"])
    assert settings.tiny_specs(cfg) == tiny_world.pair_specs(0.75, narrate=True, pair_seed=2)


TOY = (tiny_world.TinySpec("toy-a", "llama", d_model=16, n_layer=1, n_head=2, mix={"mul": 0.5, "add": 0.5}, steps=2,
                           batch=4, tokenizer_seed=1, seed=1),
       tiny_world.TinySpec("toy-b", "gpt2", d_model=16, n_layer=1, n_head=2, mix={"mul": 0.5, "add": 0.5}, steps=2,
                           batch=4, tokenizer_seed=2, seed=2))


def test_build_writes_a_shipped_pair_that_loads_and_checks_equal(tmp_path, monkeypatch, capsys):
    """`build` on two toy pairs (2 warm-start steps, in this process): it writes the folder and manifest (each model's
    pair and letter), tiny_pair loads them without a warm-start, and `build --check` on this machine finds every file equal, bit for bit; a changed file
    is named, and a manifest from another CPU says that another CPU makes another pair."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one model after the other, in this process: seconds
    shipped = str(tmp_path / "shipped")
    toys = TOY + tuple(dataclasses.replace(s, seed=s.seed + 2) for s in TOY)  # pair 1: the next inits
    assert tiny_world.build_shipped(shipped=shipped, specs=toys) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"warm-starting {', '.join(s.key() for s in toys)} from scratch in ")
    assert "built in " in out and f"wrote {shipped}: " in out
    manifest = tiny_world.read_manifest(shipped)
    assert manifest["machine"] == memory.machine() and list(manifest["models"]) == [s.key() for s in toys]
    assert [(m["pair"], m["model"]) for m in manifest["models"].values()] == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    assert not [f for f in os.listdir(tmp_path) if f.startswith((".building-", ".replaced-"))]

    with monkeypatch.context() as m:
        m.setattr(tiny_world, "warm_start", lambda *a: pytest.fail("warm-started a shipped spec"))
        assert tiny_world.tiny_pair(str(tmp_path / "cache"), toys, shipped) == [os.path.join(shipped, s.key()) for s in toys]

    assert tiny_world.build_shipped(check=True, shipped=shipped, specs=toys) == 0
    out = capsys.readouterr().out
    assert out.count("  equal    ") == 24 and "all 24 files equal, bit for bit: this machine" in out

    config = os.path.join(shipped, TOY[1].key(), "config.json")
    with open(config, "a") as f:
        f.write(" ")
    assert tiny_world.build_shipped(check=True, shipped=shipped, specs=toys) == 1
    out = capsys.readouterr().out
    assert f"  DIFFERS  {TOY[1].key()}/config.json  built " in out and out.count("  equal    ") == 23
    assert "1 of 24 files differ on the machine and stack that built the shipped pair" in out

    path = os.path.join(shipped, "MANIFEST.json")
    with open(path) as f:
        manifest = json.load(f)
    with open(path, "w") as f:
        other_cpu, other_capability = another_machine()
        json.dump({**manifest, "machine": other_cpu, "stack": {**manifest["stack"], "cpu_capability": other_capability}}, f)
    tiny_world.build_shipped(check=True, shipped=shipped, specs=toys)
    out = capsys.readouterr().out
    here = torch.backends.cpu.get_cpu_capability()
    assert f"The shipped pair was built on {other_cpu} (" in out and f"cpu_capability {other_capability} -> {here}" in out
    assert "another CPU or stack warm-starts a slightly different pair" in out


def test_build_takes_no_world_knob(capsys):
    for argv in (["build", "--seed", "1"], ["build", "--weak-habit", "0.75"], ["--check"]):
        with pytest.raises(SystemExit) as e:
            tiny_world.main(argv)
        assert e.value.code == 2
    assert "--check goes with build" in capsys.readouterr().err


@pytest.mark.slow
def test_build_check_rebuilds_the_shipped_pair_bit_for_bit():
    """SLOW, 3-4 minutes on 2 cores: build_shipped(check=True) on the main job's pair (pair 0), as `python
    machinery/tiny_world.py build --check` does for all five pairs (~8 minutes: the suite checks one), warm-starts its two
    models from scratch and compares them with tiny_pair/. Run only on the CPU and stack that built the shipped pairs
    (the manifest says which); anywhere else the pair would come out slightly different, by design (docs/runs.md)."""
    manifest = tiny_world.read_manifest()
    here = {"machine": memory.machine(), "cpu": memory.cpu_id(), "stack": memory.software_stack("cpu")}
    other = [f"{k} {manifest.get(k)!r} here {v!r}" for k, v in here.items() if manifest.get(k) != v]
    if other:
        pytest.skip("the shipped tiny pair's bit-for-bit rebuild runs only where it was built: " + "; ".join(other))
    check = "import sys; from machinery import tiny_world; sys.exit(tiny_world.build_shipped(check=True, specs=tiny_world.TINY))"
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    print(done.stdout)  # `pytest -rP` shows it
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("  equal    ") == 12 and "all 12 files equal, bit for bit" in done.stdout
