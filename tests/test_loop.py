"""Tests for the training loop in graft_min.py on tiny random models: the replacement and the
gate, peer-last minibatches, GRPO never exchanging, stored mode = online, exact resume, and
what each ablation flag changes.

Rewards come from a deterministic stand-in (a hash of the text), so that random models have
mixed and all-fail groups and exchanges really happen; everything else is the real code."""

import copy
import dataclasses
import json
import math
import os
import random
import zlib

import pytest
import torch

import graft_min
import loss
import rollout
from machinery import runlog, settings, stats, tasks, tiny_world


def fake_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


@pytest.fixture(autouse=True)
def deterministic_reward(monkeypatch):
    monkeypatch.setattr(graft_min, "reward", fake_reward)


def cfg_for(*flags):
    return settings.parse_args(["--prompts-per-step", "6", "--n", "4", "--max-new-tokens", "6", "--lr", "1e-3",
                                 "--eval-problems", "2", "--eval-samples", "1", "--steps", "2", *flags])


@pytest.fixture
def policies(llama, gpt2, char_tok_a, char_tok_b):
    out = {}
    for name, model, tok in (("a", llama, char_tok_a), ("b", gpt2, char_tok_b)):
        m = copy.deepcopy(model)
        out[name] = graft_min.Policy(name, m, tok, torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01), 1e-3)
    return out


def batch(step=0, size=6):
    return tasks.prompt_batch(tiny_world.make_world().train_problems(), 0, step, size)


# ---------------------------------------------------------------- the replacement and the gate

def test_hand_made_step_puts_exactly_the_admitted_peer_responses_into_the_buffer(policies):
    cfg = cfg_for("--max-new-tokens", "24")  # the longest peer text, 19 characters and EOS, within the budget
    recv = policies["b"]
    probs = batch(size=2)
    ro_b, _ = graft_min.rollout_groups(recv, probs, cfg, step=0)
    texts = ["12+3=15 \\boxed{15}", "7*8=56", "1,2,3 \\boxed{6}", "\\boxed{0}"] + ["9"] * 4
    finished = [True, False, True, True] + [True] * 4
    rewards = torch.tensor([[1.0, 0, 0, 1], [0, 0, 0, 0]])
    # the receiver's own mean log-prob of each text, to place s exactly where we want it
    resp = rollout.retokenize(texts[:4], finished[:4], recv.tok)
    lp, mask = rollout.token_logprobs(recv.model, [ro_b.prompt_ids[0]] * 4, resp, recv.tok.pad_token_id)
    recv_mean = loss.mean_logprob(lp, mask).detach()
    s_target = torch.tensor([1.3, 0.9, 0.5, 0.81])
    src_mean = recv_mean - torch.log(s_target)
    peer = graft_min.Groups(texts, finished, torch.cat([src_mean, torch.zeros(4)]), rewards)

    rows, s = graft_min.graft_groups(recv, ro_b, peer, [0], cfg)

    torch.testing.assert_close(torch.tensor(s), s_target, atol=1e-5, rtol=0)
    kept = [0, 1, 3]  # s = 0.5 <= delta = 0.8 is dropped
    assert [r.peer for r in rows] == [True] * 3 and all(r.prompt == 0 for r in rows)
    decoded = [recv.tok.decode(r.response_ids[:-1] if finished[i] else r.response_ids) for r, i in zip(rows, kept)]
    assert decoded == [texts[i] for i in kept]
    src_adv = [0.866025, -0.866025, -0.866025, 0.866025]  # Eq. 1 over A's full group, never re-normalised
    assert [r.advantage for r in rows] == pytest.approx([src_adv[i] for i in kept], abs=1e-5)
    assert [r.weight for r in rows] == pytest.approx([1.0, 0.9, 0.81], abs=1e-5)
    for r, i in zip(rows, kept):  # Eq. 9: the ratio's denominator is the RECEIVER's behaviour policy
        torch.testing.assert_close(r.old_logprobs, lp[i][mask[i]].detach())
        assert r.prompt_ids == ro_b.prompt_ids[0]  # the receiver's own prompt encoding


class Doubling:
    """A tokenizer that spells every character twice: a peer's text takes twice the receiver's tokens."""

    def __init__(self, tok):
        self.tok = tok

    def encode(self, text, add_special_tokens=False):
        return [i for t in self.tok.encode(text, add_special_tokens=add_special_tokens) for i in (t, t)]

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_a_peer_text_longer_than_the_receivers_budget_is_dropped_and_counted(policies, caplog):
    cfg = cfg_for("--delta", "0")  # --max-new-tokens 6; with no floor every scored response is admitted
    recv = policies["b"]
    probs = batch(size=1)
    ro_b, _ = graft_min.rollout_groups(recv, probs, cfg, step=0)
    texts, finished = ["12", "123", "1234", "1"], [True, True, False, False]
    peer = graft_min.Groups(texts, finished, torch.zeros(4), torch.tensor([[1.0, 0, 0, 1]]))
    rows, s = graft_min.graft_groups(recv, ro_b, peer, [0], cfg)
    assert [len(r.response_ids) for r in rows] == [3, 4, 4, 1] and len(s) == 4  # the receiver's own tokens: all fit
    doubled = dataclasses.replace(recv, tok=Doubling(recv.tok))
    with caplog.at_level("INFO", logger="graft_min"):
        rows, s = graft_min.graft_groups(doubled, ro_b, peer, [0], cfg)
    # doubled: "12" + EOS = 5 and "1" = 2 tokens fit in 6; "123" + EOS = 7 and "1234" = 8 do not
    assert [len(r.response_ids) for r in rows] == [5, 2] and len(s) == 2
    assert [r.advantage for r in rows] == pytest.approx([0.866025, 0.866025], abs=1e-5)  # "12" and "1": successes
    said = [r.getMessage() for r in caplog.records if "longer than --max-new-tokens" in r.getMessage()]
    assert said == ["b: 2 peer response(s) longer than --max-new-tokens 6 in its tokens, dropped (step 0)"]


def capture_updates(monkeypatch):
    seen = {}
    real = graft_min.update

    def spy(pol, rows, cfg, rng):
        seen[pol.name] = list(rows)
        return real(pol, rows, cfg, rng)
    monkeypatch.setattr(graft_min, "update", spy)
    return seen


def test_train_step_replaces_selected_groups_and_keeps_the_rest(policies, monkeypatch):
    seen = capture_updates(monkeypatch)
    cfg = cfg_for("--method", "graft", "--delta", "0")
    probs = batch(step=6)  # a step where this world exchanges both ways (A sends two groups)
    metrics, groups = graft_min.train_step(6, policies, probs, cfg)
    k = {m: groups[m].rewards.sum(1).long().tolist() for m in "ab"}
    a_to_b, b_to_a = graft_min.select_exchange(k["a"], k["b"], cfg.n)
    assert a_to_b and b_to_a, "the test world must exchange both ways; pick another step"
    for recv, selected, src in (("b", a_to_b, "a"), ("a", b_to_a, "b")):
        rows = seen[recv]
        assert metrics[recv]["selected"] == len(selected)
        for q in range(len(probs)):
            own = [r for r in rows if r.prompt == q and not r.peer]
            peer = [r for r in rows if r.prompt == q and r.peer]
            if q in selected:  # replaced: no own response left, the source's texts instead
                assert own == [] and len(peer) == cfg.n
                assert sorted(policies[recv].tok.decode(r.response_ids, skip_special_tokens=True) for r in peer) == \
                    sorted(groups[src].texts[q * cfg.n:(q + 1) * cfg.n])
            else:  # untouched, including unrescued all-fail groups (zero advantage)
                assert peer == [] and len(own) == cfg.n


def test_grpo_never_exchanges(policies, monkeypatch):
    seen = capture_updates(monkeypatch)
    metrics, groups = graft_min.train_step(5, policies, batch(step=5), cfg_for("--method", "grpo"))
    assert sum(metrics[m]["candidates_in"] for m in "ab") > 0  # GRAFT would have exchanged here
    for m in "ab":
        assert metrics[m]["selected"] == 0 and not any(r.peer for r in seen[m])


# ---------------------------------------------------------------- minibatches and the update

def _rows(peer_prompts, prompts=8):
    return [graft_min.Row(q, [1], [2, 3], torch.zeros(2), 0.5, 1.0, q in peer_prompts) for q in range(prompts)]


def test_peer_minibatches_come_last_first_or_shuffled():
    rows = _rows({2, 5})
    order = lambda mbs: [sorted({r.prompt for r in mb}) for mb in mbs]  # noqa: E731
    assert order(graft_min.minibatches(rows, 4, "last", random.Random(0))) == [[0, 1], [3, 4], [6, 7], [2, 5]]
    assert order(graft_min.minibatches(rows, 4, "first", random.Random(0))) == [[2, 5], [0, 1], [3, 4], [6, 7]]
    shuffled = [order(graft_min.minibatches(rows, 4, "shuffle", random.Random(s))) for s in range(20)]
    assert all(sorted(o) == [[0, 1], [2, 5], [3, 4], [6, 7]] for o in shuffled)
    assert len({str(o) for o in shuffled}) > 1
    assert order(graft_min.minibatches(_rows(set(), prompts=3), 4, "last", random.Random(0))) == [[0], [1], [2]]


def test_nonfinite_loss_skips_the_update_and_counts_it(policies, char_tok_b):
    pol = policies["b"]
    before = copy.deepcopy(pol.model.state_dict())
    p = char_tok_b.encode("Q:1+1=")
    rows = [graft_min.Row(0, p, char_tok_b.encode("2"), torch.tensor([-1.0]), float("nan"), 1.0, False)]
    st = graft_min.update(pol, rows, cfg_for("--minibatches", "1"), random.Random(0))
    assert st["skipped"] == 1
    for k, v in pol.model.state_dict().items():
        assert torch.equal(v, before[k])


def test_micro_batches_give_the_same_update(policies):
    cfg = cfg_for()
    ro, g = graft_min.rollout_groups(policies["a"], batch(), cfg, 0)
    adv = loss.group_advantages(g.rewards)
    rows = [r for q in range(6) for r in graft_min.own_rows(ro, q, adv[q])]
    results = []
    for micro in (None, 3):
        pol = copy.deepcopy(policies["a"])
        pol.opt = torch.optim.SGD(pol.model.parameters(), lr=1.0)
        graft_min.update(pol, rows, graft_min.argparse.Namespace(**{**vars(cfg), "micro_batch": micro}), random.Random(0))
        results.append(pol.model.state_dict())
    for k in results[0]:
        torch.testing.assert_close(results[0][k], results[1][k], atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------- ablation flags

def _peer_setup(policies):
    cfg = cfg_for()
    recv = policies["a"]
    probs = batch(size=2)
    ro, _ = graft_min.rollout_groups(recv, probs, cfg, step=0)
    texts = ["1+1=2 \\boxed{2}", "5*5=25", "\\boxed{9}", "3+4=7"] * 2
    resp = rollout.retokenize(texts[:4], [True] * 4, recv.tok)
    lp, mask = rollout.token_logprobs(recv.model, [ro.prompt_ids[1]] * 4, resp, recv.tok.pad_token_id)
    src_mean = loss.mean_logprob(lp, mask).detach() - torch.log(torch.tensor([1.2, 0.95, 0.6, 0.85]))
    peer = graft_min.Groups(texts, [True] * 8, torch.cat([torch.zeros(4), src_mean]),
                            torch.tensor([[0.0, 0, 0, 0], [1.0, 0, 1, 0]]))
    return recv, ro, peer


def _run(policies, *flags):
    recv, ro, peer = _peer_setup(policies)
    # a budget that holds the longest hand-made text (15 characters and EOS): longer peer texts are dropped
    rows, _ = graft_min.graft_groups(recv, ro, peer, [1], cfg_for("--max-new-tokens", "24", *flags))
    return [(r.peer, recv.tok.decode(r.response_ids, skip_special_tokens=True), round(r.advantage, 5),
             round(r.weight, 5)) for r in rows]


def test_ablation_flags_change_only_what_they_should(policies):
    a = round(0.5 / (math.sqrt(1 / 3) + 1e-6), 5)  # rewards [1,0,1,0]: +-0.5 / (sample std + eps)
    default = _run(policies)
    assert default == [(True, "1+1=2 \\boxed{2}", a, 1.0), (True, "5*5=25", -a, 0.95), (True, "3+4=7", -a, 0.85)]
    # no gate: every peer response, w = 1, same advantages
    assert _run(policies, "--no-gate") == [(True, t, adv, 1.0) for t, adv in
                                          [("1+1=2 \\boxed{2}", a), ("5*5=25", -a), ("\\boxed{9}", a), ("3+4=7", -a)]]
    # delta 0: the floor goes, the cap stays
    assert _run(policies, "--delta", "0") == default[:2] + [(True, "\\boxed{9}", a, 0.6)] + default[2:]
    # delta 0.9: one more response falls under the floor
    assert _run(policies, "--delta", "0.9") == default[:2]
    # success only: the failures leave, nothing else changes
    assert _run(policies, "--success-only") == default[:1]
    # pooled: the receiver's own all-fail group stays; advantages over 2n = 8 rewards [0]*6 + [1]*2
    pooled = _run(policies, "--pooled")
    r = torch.tensor([0.0] * 4 + [1, 0, 1, 0])
    pa = ((r - r.mean()) / (r.std() + 1e-6)).tolist()
    assert [x[0] for x in pooled] == [False] * 4 + [True] * 3
    assert [x[2] for x in pooled] == pytest.approx([pa[0]] * 4 + [pa[4], pa[5], pa[7]], abs=1e-5)
    assert [x[1:2] + x[3:] for x in pooled[4:]] == [d[1:2] + d[3:] for d in default]


def test_no_balance_sends_every_candidate(policies, monkeypatch):
    calls = []
    real = graft_min.select_exchange
    monkeypatch.setattr(graft_min, "select_exchange", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    graft_min.train_step(0, policies, batch(), cfg_for("--method", "graft"))
    graft_min.train_step(0, policies, batch(), cfg_for("--method", "graft", "--no-balance"))
    assert calls == [{"balance": True}, {"balance": False}]


def test_random_prompts_replace_as_many_groups_as_graft_selects_at_drawn_prompts(policies, monkeypatch):
    seen = capture_updates(monkeypatch)
    cfg = cfg_for("--method", "graft", "--delta", "0", "--random-prompts")
    probs = batch(step=6)  # the step of test_train_step_replaces_selected_groups_and_keeps_the_rest
    metrics, groups = graft_min.train_step(6, policies, probs, cfg)
    k = {m: groups[m].rewards.sum(1).long().tolist() for m in "ab"}
    a_to_b, b_to_a = graft_min.select_exchange(k["a"], k["b"], cfg.n)
    assert a_to_b and b_to_a
    rng = random.Random(graft_min.seed_for(cfg, 6, "ab", "random-prompts"))  # seeded by (seed, step): resumes exactly
    drawn = {"b": sorted(rng.sample(range(6), len(a_to_b))), "a": sorted(rng.sample(range(6), len(b_to_a)))}
    assert drawn != {"b": a_to_b, "a": b_to_a}, "the draw equals GRAFT's choice at this step; pick another step"
    for recv, src in (("b", "a"), ("a", "b")):
        rows = seen[recv]
        assert metrics[recv]["selected"] == len(drawn[recv])
        for q in range(len(probs)):
            own = [r for r in rows if r.prompt == q and not r.peer]
            peer = [r for r in rows if r.prompt == q and r.peer]
            if q in drawn[recv]:  # the peer's whole group instead of the receiver's, whatever either's rewards
                assert own == [] and len(peer) == cfg.n
                assert sorted(policies[recv].tok.decode(r.response_ids, skip_special_tokens=True) for r in peer) == \
                    sorted(groups[src].texts[q * cfg.n:(q + 1) * cfg.n])
            else:
                assert peer == [] and len(own) == cfg.n


def test_random_admission_admits_as_many_as_the_gate_drawn_at_random_with_min_s_1(policies):
    recv, ro, peer = _peer_setup(policies)

    def admitted(cfg, step):  # {text: (advantage, weight)} of the peer rows, all of them peer rows
        rows, _ = graft_min.graft_groups(recv, ro, peer, [1], cfg, step)
        assert all(r.peer for r in rows)
        return {recv.tok.decode(r.response_ids, skip_special_tokens=True): (round(r.advantage, 5), round(r.weight, 5))
                for r in rows}
    a = round(0.5 / (math.sqrt(1 / 3) + 1e-6), 5)  # s = 1.2, 0.95, 0.6, 0.85 (_peer_setup)
    full = {"1+1=2 \\boxed{2}": (a, 1.0), "5*5=25": (-a, 0.95), "\\boxed{9}": (a, 0.6), "3+4=7": (-a, 0.85)}
    for flags, count in (([], 3), (["--delta", "0.9"], 2)):  # the gate admits 3 (s > 0.8), or 2 (s > 0.9)
        cfg, draws = cfg_for("--random-admission", "--max-new-tokens", "24", *flags), set()  # the texts fit
        for step in range(12):
            got = admitted(cfg, step)
            assert len(got) == count
            assert all(got[t] == full[t] for t in got)  # source advantage, w = min(s, 1): no floor
            assert admitted(cfg, step) == got  # seeded by (seed, step, receiver): a resumed step draws the same
            draws.add(frozenset(got))
        assert len(draws) > 2  # drawn, not the gate's choice; s = 0.6 <= delta is drawn too, with w = 0.6
        assert any("\\boxed{9}" in d for d in draws)


def test_seq_ratio_gives_the_sequence_ratio_to_peer_rows_only(policies, monkeypatch):
    pol = policies["b"]
    plain = cfg_for()
    ro, g = graft_min.rollout_groups(pol, batch(), plain, 0)
    adv = loss.group_advantages(g.rewards)
    rows = [dataclasses.replace(r, peer=r.prompt in (1, 4)) for q in range(6) for r in graft_min.own_rows(ro, q, adv[q])]
    calls, real = [], loss.policy_loss
    monkeypatch.setattr(loss, "policy_loss", lambda *a: calls.append(a[7].tolist()) or real(*a))
    order = [r.peer for mb in graft_min.minibatches(rows, plain.minibatches, "last", random.Random(0)) for r in mb]
    assert order == [False] * 12 + [True] * 8 + [False] * 4  # minibatch 2: prompts 1 and 4 (peer) and 5 (own)
    for cfg, expected in ((plain, [False] * 24), (cfg_for("--seq-ratio"), order)):
        calls.clear()
        graft_min.update(copy.deepcopy(pol), rows, cfg, random.Random(0))
        assert [x for call in calls for x in call] == expected  # one micro-batch per minibatch here


# ---------------------------------------------------------------- runs: stored mode, resume

def run(model_dirs, out, *flags):
    cfg = cfg_for("--model-a", model_dirs[0], "--model-b", model_dirs[1], "--out", str(out), "--ckpt-every", "1",
                  "--eval-every", "1", *flags)
    return graft_min.run(cfg, cfg.method, str(out))


def _weights(out, name):
    return torch.load(os.path.join(out, "checkpoint.pt"), weights_only=False)["models"][name]


def test_stored_mode_equals_the_online_step_on_the_same_peer_data(model_dirs, tmp_path):
    run(model_dirs, tmp_path / "grpo", "--method", "grpo", "--steps", "1")
    online = run(model_dirs, tmp_path / "graft", "--method", "graft", "--no-balance", "--steps", "1", "--delta", "0")
    assert online["models"]["b"]["groups_exchanged"] > 0, "no exchange at step 0: the test would prove nothing"
    stored = run(model_dirs, tmp_path / "stored", "--method", "stored", "--train", "b", "--steps", "1", "--delta", "0",
                 "--peer-log", str(tmp_path / "grpo" / "trajectories.jsonl"))
    assert stored["models"]["b"]["groups_exchanged"] == online["models"]["b"]["groups_exchanged"]
    w_online, w_stored = _weights(tmp_path / "graft", "b"), _weights(tmp_path / "stored", "b")
    for k in w_online:
        assert torch.equal(w_online[k], w_stored[k]), k


def test_stored_mode_names_the_step_when_the_log_does_not_line_up(model_dirs, tmp_path):
    run(model_dirs, tmp_path / "grpo", "--method", "grpo", "--steps", "1")
    with pytest.raises(ValueError, match="seed: saved 0, now 7"):  # caught by the logged run's config.json
        run(model_dirs, tmp_path / "stored", "--method", "stored", "--steps", "1", "--seed", "7",
            "--peer-log", str(tmp_path / "grpo" / "trajectories.jsonl"))
    log_path = tmp_path / "grpo" / "trajectories.jsonl"  # a log whose prompts were not this config's
    original = log_path.read_text()
    records = [json.loads(line) for line in original.splitlines()]
    next(r for r in records if r["model"] == "a")["prompt_id"] = "not-a-prompt"  # B's peer, step 0
    log_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match="step 0: the logged prompts"):
        run(model_dirs, tmp_path / "stored", "--method", "stored", "--steps", "1",
            "--peer-log", str(tmp_path / "grpo" / "trajectories.jsonl"))
    log_path.write_text(original)
    with pytest.raises(ValueError, match="at step 1"):
        run(model_dirs, tmp_path / "stored2", "--method", "stored", "--steps", "2",
            "--peer-log", str(tmp_path / "grpo" / "trajectories.jsonl"))


def _metrics(out):
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    for m in lines:
        m.pop("seconds")
    return lines


def test_resume_after_an_interruption_matches_the_uninterrupted_run(model_dirs, tmp_path):
    run(model_dirs, tmp_path / "full", "--method", "graft", "--no-balance", "--steps", "3")
    part = tmp_path / "part"
    run(model_dirs, part, "--method", "graft", "--no-balance", "--steps", "2")
    # the kill came mid-way through step 2: a logged step past the checkpoint and a torn line
    with open(part / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "model": "a", "junk": True}) + "\n" + '{"step": 2, "mod')
    run(model_dirs, part, "--method", "graft", "--no-balance", "--steps", "3", "--resume")
    assert _metrics(part) == _metrics(tmp_path / "full")
    for name in "ab":
        for k, v in _weights(tmp_path / "full", name).items():
            assert torch.equal(v, _weights(part, name)[k]), k
    evals = lambda d: [json.loads(l) for l in open(os.path.join(d, "evals.jsonl"))]  # noqa: E731
    assert evals(part) == evals(tmp_path / "full")


def test_gradient_split_adds_up_to_the_first_update_gradient(policies):
    """At theta = theta_old the clip is inactive: the positive and negative parts of the gradient
    sum to the gradient of -J that update() computes on the same buffer (one minibatch)."""
    cfg = cfg_for("--minibatches", "1")
    pol = policies["a"]
    ro, groups = graft_min.rollout_groups(pol, batch(), cfg, step=0)
    adv = loss.group_advantages(torch.tensor([[1.0, 0, 0, 1], [0, 0, 0, 1], [1, 1, 1, 0], [0] * 4, [1, 0, 1, 0],
                                              [0, 1, 1, 1]]))
    rows = [r for q in range(6) for r in graft_min.own_rows(ro, q, adv[q])]
    rows[0].weight = 0.9  # a weight other than 1 must scale its response's part
    split = stats.gradient_split(pol, rows, cfg)
    assert all(p.grad is None for p in pol.model.parameters())  # no gradient left behind
    lp, mask = rollout.token_logprobs(pol.model, [r.prompt_ids for r in rows], [r.response_ids for r in rows],
                                      pol.tok.pad_token_id, cfg.temperature)
    old = torch.nn.utils.rnn.pad_sequence([r.old_logprobs for r in rows], batch_first=True)
    l, _ = loss.policy_loss(lp, old, torch.tensor([r.advantage for r in rows]), torch.tensor([r.weight for r in rows]),
                            mask)
    l.backward()
    total = torch.cat([p.grad.flatten() for p in pol.model.parameters()]).norm()
    assert split["grad_norm_total"] == pytest.approx(float(total), rel=1e-4)
    assert split["grad_norm_pos"] > 0 and split["grad_norm_neg"] > 0
    assert -1 <= split["grad_cos_pos_neg"] <= 1


def test_train_step_logs_entropy_and_the_gradient_split_on_request(policies):
    cfg = cfg_for("--method", "grpo", "--grad-split")
    metrics, _ = graft_min.train_step(0, policies, batch(), cfg)
    for m in metrics.values():
        assert m["entropy"] > 0 and m["sampled_logprob"] < 0
        assert m["grad_norm_pos"] >= 0 and m["grad_norm_neg"] >= 0
    plain, _ = graft_min.train_step(1, policies, batch(1), cfg_for("--method", "grpo"))
    assert "grad_norm_pos" not in plain["a"]


# ---------------------------------------------------------------- one model, no peer (pairs.SOLO, --pair coder)

def test_a_one_model_pair_trains_a_alone_exactly_as_a_trains_beside_its_peer_in_grpo(model_dirs, tmp_path):
    """--pair coder on the tiny models' A (--data tiny): the same flags as a two-model GRPO run give A the same
    metrics, evaluations and weights (a model samples the same groups with or without a peer), with no Fig. 1
    statistics (there is no peer), the finished share logged, and learning.png in place of the peer plots."""
    same = ["--n", "4", "--minibatches", "2", "--gen-batch", "24", "--micro-batch", "64", "--dtype", "float32",
            "--no-grad-checkpointing", "--lr", "1e-3", "--eval-problems", "2", "--eval-samples", "2",
            "--eval-every", "1", "--ckpt-every", "1", "--steps", "2", "--data", "tiny", "--no-lenient-answers",
            "--max-new-tokens", "6", "--eval-top-p", "0.95"]
    pair = settings.parse_args(["--model-a", model_dirs[0], "--model-b", model_dirs[1], "--out", str(tmp_path / "pair"),
                                "--prompts-per-step", "6", *same])
    solo = settings.parse_args(["--pair", "coder", "--model-a", model_dirs[0], "--out", str(tmp_path / "solo"),
                                "--prompts-per-step", "6", *same])
    assert vars(solo) | {"pair": "tiny", "method": "compare", "out": pair.out, "model_b": pair.model_b} == vars(pair)
    graft_min.run(pair, "grpo", pair.out)
    summary = graft_min.run(solo, "grpo", solo.out)
    assert list(summary["models"]) == ["a"]
    assert list(summary["models"]["a"]["end"]) == ["add", "addc", "mul", "mulc", "mean"]  # pass@1, not the shares
    strip = ("seconds", "peer_any_success_on_all_fail", "peer_mixed_on_all_fail", "candidates_in")
    a_of = lambda out: [{k: v for k, v in m.items() if k not in strip}  # noqa: E731
                        for m in map(json.loads, open(os.path.join(out, "metrics.jsonl"))) if m["model"] == "a"]
    assert a_of(solo.out) == a_of(pair.out) and len(a_of(solo.out)) == 2
    solo_metrics = [json.loads(line) for line in open(os.path.join(solo.out, "metrics.jsonl"))]
    assert all(not set(strip[1:]) & set(m) and 0 <= m["finished_share"] <= 1 for m in solo_metrics)
    evals = lambda out: [e for e in map(json.loads, open(os.path.join(out, "evals.jsonl"))) if e["model"] == "a"]  # noqa: E731
    assert evals(solo.out) == evals(pair.out) and all(set(e["finished"]) == set(e) - {"step", "model", "mean",
                                                      "finished", "pass_finished"} for e in evals(solo.out))
    for k, v in _weights(solo.out, "a").items():
        assert torch.equal(v, _weights(pair.out, "a")[k]), k
    from machinery import plots
    written = [os.path.basename(p) for p in plots.plot_runs([solo.out])]
    assert written == ["accuracy.png", "training.png", "learning.png"]
    assert all(os.path.getsize(os.path.join(solo.out, w)) > 10_000 for w in written)


def test_evaluate_counts_finished_samples_and_pass_at_1_among_them(policies, monkeypatch):
    """graft_min.evaluate with the real verifier on hand-made samples: pass@1, the finished share and pass@1 among
    the finished samples, per family (None where none finished)."""
    import verifier
    monkeypatch.setattr(graft_min, "reward", verifier.reward)
    made = {"add": (["\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "so 4"], [True, True, False, False]),
            "mul": (["\\boxed{6}", "it is \\boxed{6}"], [False, False])}
    heldout = {"add": [tasks.Problem("add/1+1", "add", "Q:1+1=", "2"), tasks.Problem("add/2+2", "add", "Q:2+2=", "4")],
               "mul": [tasks.Problem("mul/2*3", "mul", "Q:2*3=", "6")]}

    def sample_groups(model, tok, prompt_ids, n, *args, desc=None, **kw):
        texts, finished = made[desc.split()[-1]]
        assert n == 2 and len(texts) == len(prompt_ids) * n
        return rollout.Rollout(prompt_ids, [[1]] * len(texts), texts, finished, [], n)
    monkeypatch.setattr(rollout, "sample_groups", sample_groups)
    result = graft_min.evaluate(policies["a"], heldout, cfg_for("--eval-samples", "2"), 0)
    assert result == {"add": 0.5, "mul": 1.0, "mean": 0.75, "finished": {"add": 0.5, "mul": 0.0},
                      "pass_finished": {"add": 0.5, "mul": None}}


def exchange_line(sent, admitted, s):
    return {"peer_responses": sent, "admitted": admitted, "s_values": s}


def test_the_gate_report_speaks_once_after_three_exchanges_that_admitted_almost_nothing():
    shut = [exchange_line(0, 0, []), exchange_line(4, 0, [0.5, 0.3, 0.7, 0.2]), exchange_line(0, 0, []),
            exchange_line(2, 0, [0.6, 0.1]), exchange_line(4, 0, [0.4, 0.5, 0.35, 0.3])]
    said = [stats.gate_report("b", shut[:i + 1], 0.8) for i in range(len(shut))]
    # s sorted: 0.1 0.2 0.3 0.3 0.35 0.4 0.5 ..., the median (0.35 + 0.4) / 2
    assert said[:4] == [None] * 4 and said[4] == (
        "model b: the gate admitted 0 of 10 peer responses over its first 3 exchanges (median s 0.38, delta 0.8): "
        "GRAFT runs as GRPO here; the pair's texts are too unlikely under each other "
        "(docs/real_models.md#when-the-gate-stays-shut)")
    assert stats.gate_report("b", shut + [exchange_line(0, 0, [])], 0.8) is None  # once: at the third exchange only
    assert stats.gate_report("b", shut + [exchange_line(3, 0, [0.1] * 3)], 0.8) is None
    open_gate = shut[:4] + [exchange_line(10, 1, [0.9] + [0.1] * 9)]  # 1 of 16 admitted: over 5%
    assert stats.gate_report("b", open_gate, 0.8) is None


def test_a_graft_run_whose_gate_admits_nothing_says_so_in_one_line(policies, monkeypatch, tmp_path, caplog):
    cfg = cfg_for("--method", "graft", "--delta", "100", "--no-balance", "--steps", "8", "--eval-every", "8",
                  "--out", str(tmp_path / "run"))
    monkeypatch.setattr(settings, "model_paths", lambda cfg: {"a": "a", "b": "b"})
    monkeypatch.setattr(graft_min, "make_policy", lambda name, path, lr, cfg: policies[name])
    monkeypatch.setattr(settings, "load_data", lambda cfg, paths=None: (
        tiny_world.make_world().train_problems(), {"add": tiny_world.make_world().train_problems()[:2]}))
    with caplog.at_level("INFO", logger="graft_min"):
        graft_min.run(cfg, "graft", str(tmp_path / "run"))
    metrics = runlog.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    said = [r.getMessage() for r in caplog.records if "the gate admitted" in r.getMessage()]
    for name in "ab":  # delta 100 admits nothing: a receiver with 3 steps that scored peer responses says so once
        exchanges = [m["step"] for m in metrics if m["model"] == name and m["peer_responses"]]
        assert [line.startswith(f"model {name}: the gate admitted 0 of ") for line in said].count(True) == \
            (len(exchanges) >= 3)
    assert said, "no receiver had three exchanges in 8 steps: pick another seed or more steps"
