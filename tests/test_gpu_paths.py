"""What a GPU changes (DESIGN.md "On a GPU", issue 37), exercised on the CPU with the tiny random models:
sampling from a bf16 copy that follows the fp32 master weights after every optimizer step and after a
resume, that samples softmax(logits / T) of the copy while the master scores, and fused AdamW on CUDA only.

Rewards come from a hash of the text (as in test_loop.py), so that groups mix and GRAFT exchanges."""

import copy
import os
import zlib

import pytest
import torch

import graft_min
import pairs
import rollout
import settings
from conftest import make_model


def fake_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


@pytest.fixture(autouse=True)
def deterministic_reward(monkeypatch):
    monkeypatch.setattr(graft_min, "reward", fake_reward)


def copy_is_cast_master(pol):
    """The sampling copy holds exactly the master's fp32 weights cast to bf16, parameter by parameter."""
    pairs_ = list(zip(pol.sampler.named_parameters(), pol.model.named_parameters(), strict=True))
    return all(n == m and c.dtype == torch.bfloat16 and torch.equal(c, p.detach().to(torch.bfloat16))
               for (n, c), (m, p) in pairs_)


def test_the_copy_is_made_on_cuda_in_bf16_only():
    for device, dtype, wanted in (("cuda", "bfloat16", True), ("cuda:1", "bfloat16", True), ("cuda", "float32", False),
                                  ("cpu", "bfloat16", False), ("cpu", "float32", False)):
        cfg = settings.parse_args(["--device", device, "--dtype", dtype])
        assert pairs.samples_from_bf16_copy(cfg) is wanted, (device, dtype)


def test_bf16_copy_casts_the_parameters_keeps_the_buffers_and_ties(llama):
    sampler = pairs.bf16_copy(llama)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in sampler.parameters())
    assert all(p.dtype == torch.float32 and p.requires_grad for p in llama.parameters())  # the master is untouched
    for (name, b), (_, b0) in zip(sampler.named_buffers(), llama.named_buffers()):
        assert b.dtype == b0.dtype and torch.equal(b, b0), name  # RoPE's inverse frequencies stay fp32
    tied = llama.get_output_embeddings().weight is llama.get_input_embeddings().weight
    assert (sampler.get_output_embeddings().weight is sampler.get_input_embeddings().weight) == tied
    assert not sampler.training


def test_sampling_from_the_copy_follows_its_softmax_and_the_master_scores(char_tok_a):
    torch.manual_seed(0)
    master = make_model("llama", char_tok_a, seed=5)
    with torch.no_grad():  # weights large enough that bf16 rounding moves the first-token distribution visibly
        for p in master.parameters():
            p.mul_(3.0)
    sampler = pairs.bf16_copy(master)
    prompt = char_tok_a.encode("Q:12*3=")
    N, T = 4000, 0.8
    torch.manual_seed(0)
    ro = rollout.sample_groups(master, char_tok_a, [prompt], N, max_new_tokens=1, temperature=T, sampler=sampler)
    counts = torch.bincount(torch.tensor([r[0] for r in ro.response_ids]), minlength=len(char_tok_a)).float()
    with torch.no_grad():
        probs = {name: torch.softmax(m(torch.tensor([prompt])).logits[0, -1].float() / T, -1)
                 for name, m in (("copy", sampler), ("master", master))}
    tv = {name: 0.5 * (counts / N - q).abs().sum().item() for name, q in probs.items()}
    assert (counts > 0).sum() > 5 and tv["copy"] < 0.05, tv
    # the behaviour log-probs are the master's (the training forward), not the copy's
    lp, _ = rollout.token_logprobs(master, [prompt] * 8, ro.response_ids[:8], char_tok_a.pad_token_id, T)
    for i in range(8):
        assert torch.equal(ro.logprobs[i], lp[i, :1].float())
    assert all(p.dtype == torch.bfloat16 for p in sampler.parameters())  # sampling left the copy as it was


def run(model_dirs, out, *flags):
    cfg = settings.parse_args(["--prompts-per-step", "6", "--n", "4", "--max-new-tokens", "6", "--lr", "1e-2",
                                "--eval-problems", "2", "--eval-samples", "1", "--ckpt-every", "1", "--eval-every",
                                "1", "--minibatches", "2", "--model-a", model_dirs[0], "--model-b", model_dirs[1],
                                "--out", str(out), "--method", "graft", *flags])
    return graft_min.run(cfg, cfg.method, str(out))


def test_the_copy_equals_the_cast_master_at_every_sampling_after_every_step_and_after_a_resume(
        model_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(pairs, "samples_from_bf16_copy", lambda cfg: True)  # as on CUDA, here on the CPU
    made, checks, refreshes = [], [], []
    real_make, real_sample, real_refresh = graft_min.make_policy, rollout.sample_groups, pairs.refresh_copy

    def make(*a, **kw):
        pol = real_make(*a, **kw)
        made.append(pol)
        return pol

    def sample(model, *a, sampler=None, **kw):  # every sampling call, training and evaluation: from a fresh copy
        pol = next(p for p in made if p.model is model)
        assert sampler is pol.sampler is not None
        checks.append(copy_is_cast_master(pol))
        return real_sample(model, *a, sampler=sampler, **kw)

    def refresh(sampler, model):
        refreshes.append(sampler)
        real_refresh(sampler, model)
    monkeypatch.setattr(graft_min, "make_policy", make)
    monkeypatch.setattr(rollout, "sample_groups", sample)
    monkeypatch.setattr(pairs, "refresh_copy", refresh)
    out = tmp_path / "run"
    run(model_dirs, out, "--steps", "2")
    steps = 2 * 2 * 2  # 2 steps x 2 minibatches x 2 models: one refresh after each optimizer step
    assert len(refreshes) == steps and checks and all(checks)
    assert len(checks) == 2 * (2 + 3 * 4)  # per model: 2 rollouts, 3 evaluations (steps 0, 1, 2) of 4 families
    trained = {pol.name: copy.deepcopy(pol.sampler.state_dict()) for pol in made}
    # resume: the fresh copies are made from the loaded weights before anything samples
    made.clear(), checks.clear(), refreshes.clear()
    run(model_dirs, out, "--steps", "3", "--resume")
    assert len(checks) == 2 * (1 + 4) and all(checks)  # per model: step 2's rollout, its evaluation
    assert len(refreshes) == 2 + 2 * 2  # one per loaded model, then one per optimizer step
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    for pol in made:
        assert copy_is_cast_master(pol)
        assert all(torch.equal(p, ckpt["models"][pol.name][n]) for n, p in pol.model.state_dict().items())
        # and the copy did move with training: step 2's weights are not step 2's start
        assert any(not torch.equal(v, pol.sampler.state_dict()[k]) for k, v in trained[pol.name].items())


def test_adamw_is_fused_on_cuda_only(model_dirs, monkeypatch):
    seen = []

    class Spy(torch.optim.AdamW):
        def __init__(self, params, **kw):
            seen.append(kw.get("fused"))
            super().__init__(params, **{**kw, "fused": None})  # no CUDA here: build it unfused
    monkeypatch.setattr(torch.optim, "AdamW", Spy)
    monkeypatch.setattr(pairs, "load_for_rl", lambda path, cfg: pairs.load_policy(path, "cpu", torch.float32) + (None,))
    for device, fused in (("cpu", None), ("cuda", True)):
        cfg = settings.parse_args(["--device", device, "--model-a", model_dirs[0], "--model-b", model_dirs[1]])
        graft_min.make_policy("a", model_dirs[0], 1e-3, cfg)
        assert seen[-1] is fused, device
    assert os.path.isdir(model_dirs[0])
