"""Tests for tiny_world.py: the warm-start cache is reused, rebuilt when its spec changes, and a
corrupt cache is rebuilt with a warning instead of crashing inside transformers."""

import logging
import os

import pytest
import torch

import pairs
import rollout
import tiny_world

SPEC = tiny_world.TinySpec("test-cache", "llama", d_model=16, n_layer=1, n_head=2, mix={"mul": 0.5, "add": 0.5},
                      steps=2, batch=4, seed=0)


@pytest.fixture
def built(tmp_path):
    return tiny_world.ensure_tiny_model(SPEC, str(tmp_path)), tmp_path


def test_cache_is_reused(built, monkeypatch):
    path, cache = built
    assert os.path.isfile(os.path.join(path, "tiny_spec.json"))
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
