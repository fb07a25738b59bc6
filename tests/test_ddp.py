"""Tests for data-parallel GRAFT (machinery/ddp.py and its use in graft_min.py), on the CPU with gloo and 2
processes: the selection over the whole batch from gathered counts, Eq. 10's divisor and gradients
summed over ranks (the same gradient as one process on the whole buffer, the same weights on every
rank), a non-finite minibatch skipped everywhere, and the real CLI under torchrun: a 2-process
tiny-pair run that writes one run folder, resumes after a kill and refuses another world size, and
a 1-process torchrun equal to plain python number for number.

The in-process cases start 2 processes with torch.multiprocessing (each joins through ddp.init, as
under torchrun); each writes what it computed to a file that the test reads."""

import copy
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import zlib

import pytest
import torch
import torch.multiprocessing as mp

import graft_min
import rollout
from machinery import ddp, pairs, runlog, settings, tasks, tiny_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, port, out, fn, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2")
    torch.set_num_threads(1)
    assert ddp.init("cpu") == "cpu" and ddp.world_size() == 2 and ddp.rank() == rank
    try:
        torch.save(fn(rank, *args), os.path.join(out, f"rank{rank}.pt"))
    finally:
        ddp.close()


def on_two_ranks(tmp_path, fn, *args):
    """fn(rank, *args) on 2 gloo processes; returns [rank 0's result, rank 1's]."""
    mp.spawn(_worker, args=(free_port(), str(tmp_path), fn, args), nprocs=2, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_without_torchrun_every_helper_is_a_no_op():
    assert "RANK" not in os.environ and ddp.init("cpu") == "cpu"
    assert (ddp.rank(), ddp.world_size(), ddp.is_main()) == (0, 1, True)
    assert ddp.shard([1, 2, 3]) == ([1, 2, 3], 0) and ddp.gather({"x": 1}) == [{"x": 1}]
    values = {"s": [0.5], "n": 3}
    assert ddp.combine(values) is values and ddp.total(2.5) == 2.5 and ddp.maximum(4) == 4


# ---------------------------------------------------------------- (a) the selection over the whole batch

# per prompt of an 8-prompt batch, n = 4: (k_a, k_b); rank 0 holds prompts 0-3, rank 1 prompts 4-7
CASES = {
    # B -> A candidates only on rank 0 (prompts 0-2): alone, rank 1 would balance to m = 0 and send nothing
    "one rank has no candidate one way": [(0, 2), (0, 3), (0, 1), (4, 4), (2, 0), (3, 0), (1, 0), (4, 0)],
    # ties at the m-th source count across the two ranks: m = 2, A's counts 3, 2, 2 -> all three kept
    "ties across ranks": [(3, 0), (0, 1), (2, 0), (0, 0), (2, 0), (0, 2), (4, 4), (1, 1)],
    "nothing to exchange": [(4, 4), (0, 0), (4, 0), (0, 4), (2, 2), (1, 3), (0, 0), (4, 4)],
}


def _exchange(rank, cases):
    out = {}
    for name, counts in cases.items():
        mine = counts[4 * rank:4 * rank + 4]
        k_local = {"a": torch.tensor([a for a, _ in mine]), "b": torch.tensor([b for _, b in mine])}
        k = ddp.combine(k_local)  # every rank's counts, in rank order: the whole batch's (as train_step gathers them)
        for balance in (True, False):
            out[name, balance] = graft_min.exchange(k, 4, balance, 4 * rank, 4)
    return out


def test_gathered_selection_equals_select_exchange_on_the_whole_batch(tmp_path):
    results = on_two_ranks(tmp_path, _exchange, CASES)
    for name, counts in CASES.items():
        k_a, k_b = [a for a, _ in counts], [b for _, b in counts]
        for balance in (True, False):
            to_b, to_a = graft_min.select_exchange(k_a, k_b, 4, balance=balance)
            for rank in range(2):
                local = lambda sel: [q - 4 * rank for q in sel if 4 * rank <= q < 4 * rank + 4]  # noqa: E731
                assert results[rank][name, balance] == {"b": local(to_b), "a": local(to_a)}, (name, balance, rank)
    # the case that needs the gather: rank 1 has no B -> A candidate, yet A -> B groups reach B on rank 1
    got = results[1]["one rank has no candidate one way", True]
    alone_b, alone_a = graft_min.select_exchange([2, 3, 1, 4], [0, 0, 0, 0], 4)  # rank 1's prompts on their own
    assert (alone_b, alone_a) == ([], []) and got["b"] == [0, 1, 2]  # m = 3 over the batch: prompts 4, 5, 6
    assert results[0]["one rank has no candidate one way", True] == {"b": [], "a": [0, 1, 2]}


# ---------------------------------------------------------------- (b) Eq. 10 over ranks

def cfg_for(*flags):
    return settings.parse_args(["--prompts-per-step", "8", "--n", "3", "--lr", "1e-2", "--grad-clip", "1e9", *flags])


def make_policy(model_dir):
    model, tok = pairs.load_policy(model_dir)
    return graft_min.Policy("a", model, tok, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01), 1e-2)


def fixed_buffer(pol, prompts=8, peer=(3, 7), nan_prompt=None):
    """3 responses per prompt of 2-7 tokens, old log-probs off the current ones by noise (ratios away
    from 1, some clipped), mixed advantages, peer responses (w 0.85) on the prompts `peer`."""
    g = torch.Generator().manual_seed(0)
    vocab = pol.model.config.vocab_size
    rows = []
    for q in range(prompts):
        prompt = torch.randint(4, vocab, (int(torch.randint(3, 6, (1,), generator=g)),), generator=g).tolist()
        for i in range(3):
            resp = torch.randint(4, vocab, (int(torch.randint(2, 8, (1,), generator=g)),), generator=g).tolist()
            with torch.no_grad():
                lp, _ = rollout.token_logprobs(pol.model, [prompt], [resp], pol.tok.pad_token_id)
            old = lp[0] + 0.3 * torch.randn(len(resp), generator=g)
            if q == nan_prompt:
                old[0] = float("nan")
            adv = float(torch.randn(1, generator=g))
            rows.append(graft_min.Row(q, prompt, resp, old, adv, 0.85 if q in peer else 1.0, q in peer))
    return rows


def grads_and_weights(pol):
    return ([p.grad.clone() if p.grad is not None else None for p in pol.model.parameters()],
            {k: v.clone() for k, v in pol.model.state_dict().items()})


def _update(rank, model_dir, flags, shares, nan_prompt):
    pol = make_policy(model_dir)
    rows = fixed_buffer(pol, nan_prompt=nan_prompt)
    lo, hi = shares[rank]
    mine = [copy.copy(r) for r in rows if lo <= r.prompt < hi]
    for r in mine:
        r.prompt -= lo  # local prompt indices, as train_step gives them
    st = graft_min.update(pol, mine, cfg_for(*flags), random.Random(0))
    return st, *grads_and_weights(pol)


def test_gradient_summed_over_two_ranks_equals_one_process_on_the_whole_buffer(model_dirs, tmp_path):
    one = make_policy(model_dirs[0])
    st1 = graft_min.update(one, fixed_buffer(one), cfg_for("--minibatches", "1"), random.Random(0))
    grads1, weights1 = grads_and_weights(one)
    (st_0, grads_0, weights_0), (st_1, grads_1, weights_1) = on_two_ranks(
        tmp_path, _update, model_dirs[0], ["--minibatches", "1"], [(0, 4), (4, 8)], None)
    for g, g0, g1 in zip(grads1, grads_0, grads_1):
        assert torch.equal(g0, g1)  # the same summed gradient on both ranks
        assert float((g0 - g).norm()) <= 1e-6 * float(g.norm()) + 1e-12
    # after the AdamW step, equal weights on both ranks, and each process's weights are exactly one AdamW step on
    # its gradient: the ranks' on the summed one (equal to one process's to 1e-6 of its norm, above), one process's
    # on its own. (Weights are not compared to each other with a fixed tolerance: AdamW's first step is
    # lr * g / (|g| + eps), so an element whose g is near eps turns the summation order's last-bit rounding into a
    # visible share of lr, more on some CPUs than others: 2.6e-4 of lr on an Intel Xeon, under 1e-4 on an AMD EPYC.)
    for grads, weights in ((grads_0, weights_0), (grads1, weights1)):
        ref = make_policy(model_dirs[0])
        for p, g in zip(ref.model.parameters(), grads):
            p.grad = g
        ref.opt.step()
        for k, v in ref.model.state_dict().items():
            assert torch.equal(weights[k], v), k
    for k in weights1:
        assert torch.equal(weights_0[k], weights_1[k]), k
    assert st_0["loss"] == st_1["loss"] == pytest.approx(st1["loss"], rel=1e-6)
    assert st_0["grad_norm"] == pytest.approx(st1["grad_norm"], rel=1e-6)
    assert st_0["tok_self"] + st_1["tok_self"] == st1["tok_self"] and st1["clip_self"] > 0  # some tokens clipped


def test_uneven_buffers_step_together_peer_last_on_each_rank(model_dirs, tmp_path):
    # rank 0: prompts 0-6 (peer on 3), rank 1: prompt 7 only (peer): 2 minibatches on rank 0; on rank 1 an empty
    # one, then prompt 7 (peer-last on each rank)
    (st_0, _, weights_0), (st_1, _, weights_1) = on_two_ranks(
        tmp_path, _update, model_dirs[0], ["--minibatches", "2"], [(0, 7), (7, 8)], None)
    assert st_0["minibatches"] == st_1["minibatches"] == 2 and st_0["skipped"] == 0
    assert st_0["peer_minibatch_positions"] == st_1["peer_minibatch_positions"] == [1]
    assert st_0["loss"] == st_1["loss"] and st_0["grad_norm"] == st_1["grad_norm"]
    before = make_policy(model_dirs[0]).model.state_dict()
    assert all(torch.equal(weights_0[k], weights_1[k]) for k in weights_0)
    assert not torch.equal(weights_0["lm_head.weight"], before["lm_head.weight"])  # both minibatches stepped


def test_a_nonfinite_minibatch_on_one_rank_is_skipped_on_every_rank(model_dirs, tmp_path):
    (st_0, _, weights_0), (st_1, _, weights_1) = on_two_ranks(
        tmp_path, _update, model_dirs[0], ["--minibatches", "1"], [(0, 4), (4, 8)], 6)  # a NaN on rank 1's prompt 6
    before = make_policy(model_dirs[0]).model.state_dict()
    assert st_0["skipped"] == st_1["skipped"] == 1
    assert all(torch.equal(weights_0[k], before[k]) and torch.equal(weights_1[k], before[k]) for k in before)


def fake_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


def _train_step(rank, model_dirs):
    graft_min.reward = fake_reward  # mixed and all-fail groups on random models, so that groups are exchanged
    cfg = settings.parse_args(["--prompts-per-step", "8", "--n", "4", "--max-new-tokens", "6", "--lr", "1e-3",
                               "--method", "graft", "--no-balance", "--delta", "0", "--minibatches", "2"])
    policies = {}
    for name, path in zip("ab", model_dirs):
        model, tok = pairs.load_policy(path)
        policies[name] = graft_min.Policy(name, model, tok, torch.optim.AdamW(model.parameters(), lr=1e-3), 1e-3)
    batch = tasks.prompt_batch(tiny_world.make_world().train_problems(), 0, 0, 8)
    metrics, groups = graft_min.train_step(0, policies, batch, cfg)
    for m in metrics.values():
        m.pop("seconds")
    return metrics, {n: p.model.state_dict() for n, p in policies.items()}, groups


def test_a_train_step_on_two_ranks_logs_the_whole_batch_and_keeps_the_weights_equal(model_dirs, tmp_path):
    (m0, w0, g0), (m1, w1, g1) = on_two_ranks(tmp_path, _train_step, model_dirs)
    assert m0 == m1  # every rank holds the whole batch's metrics
    assert all(torch.equal(w0[n][k], w1[n][k]) for n in w0 for k in w0[n])
    assert g0["a"].texts == g1["a"].texts and len(g0["a"].texts) == 8 * 4 and g0["b"].rewards.shape == (8, 4)
    k = {n: g0[n].rewards.sum(1) for n in "ab"}
    for recv, src in (("a", "b"), ("b", "a")):  # Eq. 4 over the whole batch, no balancing
        assert m0[recv]["selected"] == int(((k[recv] == 0) & (k[src] > 0) & (k[src] < 4)).sum())
    assert m0["a"]["selected"] + m0["b"]["selected"] > 0 and m0["a"]["tokens_peer"] + m0["b"]["tokens_peer"] > 0


# ---------------------------------------------------------------- the CLI under torchrun

FLAGS = ["--pair", "tiny", "--method", "graft", "--prompts-per-step", "8", "--group-size", "4", "--eval-every", "2",
         "--eval-problems", "6", "--eval-samples", "1", "--ckpt-every", "1", "--threads", "1"]


def launch(out, nproc, *extra, log_name=None):
    """`torchrun --standalone --nproc_per_node nproc graft_min.py ...` (nproc 0: plain python), output in a log."""
    head = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc \
        else [sys.executable]
    log = open(log_name or f"{out}.log", "a")
    return subprocess.Popen([*head, "graft_min.py", *FLAGS, "--out", str(out), *extra], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def finish(proc, out):
    assert proc.wait(timeout=600) == 0, open(f"{out}.log").read()[-3000:]


def without(records, key):
    return [{k: v for k, v in r.items() if k != key} for r in records]


def logged_steps(path):
    return [json.loads(line)["step"] for line in open(path) if line.endswith("\n")] if os.path.exists(path) else []


def kill_all(marker):
    """SIGKILL every process whose command line holds `marker` (here: the run folder)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read() and int(pid) != os.getpid():
                    os.kill(int(pid), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass  # ended meanwhile


def test_two_processes_write_one_folder_resume_after_a_kill_and_refuse_another_world_size(tiny_pair_ready, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    finish(launch(full, 2, "--steps", "3"), full)
    assert sorted(os.listdir(full)) == ["checkpoint.pt", "config.json", "evals.jsonl", "metrics.jsonl", "summary.json",
                                        "trajectories.jsonl"]  # one folder, each file once
    config = runlog.read_json(full / "config.json")
    assert config["world_size"] == 2 and config["prompts_per_step"] == 8
    metrics = runlog.read_jsonl(full / "metrics.jsonl")
    assert [(m["step"], m["model"]) for m in metrics] == [(s, n) for s in range(3) for n in "ab"]  # rank 0 alone wrote
    assert len(runlog.read_jsonl(full / "trajectories.jsonl")) == 3 * 2 * 8  # the whole batch, every step
    assert sum(m["selected"] for m in metrics) > 0  # groups were exchanged

    proc, deadline = launch(part, 2, "--steps", "3"), time.monotonic() + 600
    while not any(s >= 1 for s in logged_steps(part / "metrics.jsonl")):
        assert proc.poll() is None, open(f"{part}.log").read()[-3000:]
        assert time.monotonic() < deadline, "no step 1 within 10 minutes"
        time.sleep(0.01)
    kill_all(str(part))  # torchrun and both ranks (torchrun starts each rank in its own session)
    proc.wait()
    killed_at = torch.load(part / "checkpoint.pt", weights_only=False)["next_step"]
    assert 1 <= killed_at < 3 and not (part / "summary.json").exists()

    refused = subprocess.run([sys.executable, "graft_min.py", *FLAGS, "--steps", "3", "--out", str(part), "--resume"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "written by 2 process(es), this is 1" in refused.stderr
    assert "torchrun --nproc_per_node 2" in refused.stderr

    finish(launch(part, 2, "--steps", "3", "--resume"), part)
    assert f"at step {killed_at}" in open(f"{part}.log").read()
    read = runlog.read_jsonl
    assert without(read(part / "metrics.jsonl"), "seconds") == without(read(full / "metrics.jsonl"), "seconds")
    assert read(part / "trajectories.jsonl") == read(full / "trajectories.jsonl")
    assert read(part / "evals.jsonl") == read(full / "evals.jsonl")


def test_prompts_per_step_must_divide_by_the_world_size():
    proc = subprocess.run([sys.executable, "graft_min.py", *FLAGS, "--prompts-per-step", "7"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "WORLD_SIZE": "2"})
    assert proc.returncode == 2 and "--prompts-per-step 7 does not divide by the 2 processes" in proc.stderr


def test_torchrun_with_one_process_equals_plain_python(tiny_pair_ready, tmp_path):
    plain, one = tmp_path / "plain", tmp_path / "one"
    finish(launch(plain, 0, "--steps", "2"), plain)
    finish(launch(one, 1, "--steps", "2"), one)
    read = runlog.read_jsonl
    assert without(read(one / "metrics.jsonl"), "seconds") == without(read(plain / "metrics.jsonl"), "seconds")
    assert read(one / "trajectories.jsonl") == read(plain / "trajectories.jsonl")
    assert read(one / "evals.jsonl") == read(plain / "evals.jsonl")
    assert runlog.read_json(one / "config.json")["world_size"] == 1
    assert any(m["selected"] > 0 for m in read(plain / "metrics.jsonl"))


def test_the_main_job_and_stored_mode_run_under_torchrun(tiny_pair_ready, tmp_path):
    """compare: GRPO, then GRAFT, each over both ranks; rank 0 alone prints the table and writes the summary.
    stored: model B learns from a logged run's groups, each rank replaying its share of the batch."""
    out = tmp_path / "compare"
    flags = [a for a in FLAGS if a not in ("--method", "graft")]
    log = open(f"{out}.log", "w")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "graft_min.py", *flags, "--steps", "1", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=log, text=True, timeout=600)
    assert proc.returncode == 0, open(f"{out}.log").read()[-3000:]
    assert proc.stdout.count("held-out pass@1 (T 0.6), start and end of training") == 1  # one table, from rank 0
    summary = runlog.read_json(out / "summary.json")
    assert sorted(summary["methods"]) == ["graft", "grpo"]
    for method in ("grpo", "graft"):
        assert runlog.read_json(out / method / "config.json")["world_size"] == 2

    stored = tmp_path / "stored"
    finish(launch(stored, 2, "--steps", "1", "--method", "stored", "--train", "b", "--peer-log",
                  str(out / "grpo" / "trajectories.jsonl")), stored)
    metrics = runlog.read_jsonl(stored / "metrics.jsonl")
    assert [m["model"] for m in metrics] == ["b"] and metrics[0]["candidates_in"] >= metrics[0]["selected"]
    logged = [r for r in runlog.read_jsonl(out / "grpo" / "trajectories.jsonl") if r["model"] == "a"]
    k_a = [sum(r["rewards"]) for r in logged]  # the replayed peer's success counts, whole batch
    own = runlog.read_jsonl(stored / "trajectories.jsonl")  # B's groups of the whole batch, from both ranks
    assert len(own) == len(k_a) == 8
    assert metrics[0]["candidates_in"] == sum(1 for q, r in enumerate(own) if sum(r["rewards"]) == 0 and 0 < k_a[q] < 4)
