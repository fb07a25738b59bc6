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


# ---------------------------------------------------------------- --gen-batch / --micro-batch auto

def small_pair_on_meta():
    """The `small` pair's two architectures at their published sizes, on the meta device (shapes, no memory)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import bench_small
    from transformers import AutoConfig, AutoModelForCausalLM
    with torch.device("meta"):
        return [AutoModelForCausalLM.from_config(AutoConfig.for_model(**c))
                for c in (bench_small.QWEN25_05B, bench_small.SMOLLM2_360M)]


def test_kv_cache_bytes_per_token_are_the_architectures():
    import memory
    qwen, smol = small_pair_on_meta()
    # a token's K and V in every layer: 2 x 24 layers x 2 KV heads x 64 dims x 2 bytes (bf16) = 12,288 for
    # Qwen2.5-0.5B, 2 x 32 x 5 x 64 x 2 = 40,960 for SmolLM2-360M; twice that in fp32 (4-byte cache)
    for model, per_token in ((qwen, 12_288), (smol, 40_960)):
        for cache_bytes in (2, 4):
            grow = memory.sampling_bytes(model, 1025, cache_bytes) - memory.sampling_bytes(model, 1024, cache_bytes)
            assert grow == per_token * cache_bytes // 2
    # the update keeps each layer's input of each position with checkpointing: 24 x 896 x 4 bytes for Qwen, plus
    # one layer's recompute; without it, every layer's activations
    assert memory.update_bytes(qwen, 1025, True) - memory.update_bytes(qwen, 1024, True) > 24 * 896 * 4
    assert memory.update_bytes(qwen, 1024, False) > 10 * memory.update_bytes(qwen, 1024, True)


@pytest.mark.parametrize("card_gib", [24, 80, 141])
def test_auto_sizes_of_the_small_preset_fit_the_card_and_are_the_largest_that_do(card_gib):
    import memory
    models = small_pair_on_meta()
    cfg = settings.parse_args(["--pair", "small", "--device", "cpu"])
    assert (cfg.gen_batch, cfg.micro_batch) == ("auto", "auto")  # the preset's default
    n = sum(p.numel() for m in models for p in m.parameters())
    free = card_gib * 2**30 - 6 * n - 2**29  # fp32 masters and bf16 copies loaded, half a GiB of CUDA context
    gen, micro, _ = memory.auto_batch_sizes(models, [object(), object()], cfg, free)
    per_gen = max(memory.sampling_bytes(m, 1024, 2) for m in models)
    per_update = max(memory.update_bytes(m, 1024, True) for m in models)
    spent = 12 * n + max(2**30, free // 10)  # gradients and AdamW states of both models, the reserve
    chunk = 16 * rollout.CHUNK_ELEMENTS
    assert spent + gen * per_gen <= free and spent + chunk + micro * per_update <= free  # inside the card
    assert gen == 256 or spent + (gen + 1) * per_gen > free  # the largest: one more would not fit, or a step's all
    assert micro == 64 or spent + chunk + (micro + 1) * per_update > free  # or the whole minibatch (256 / 4)
    assert micro >= 2 and gen >= 32  # a 24 GB card still runs the preset, at least at its former fixed sizes


def test_auto_sizes_refuse_a_card_too_small_and_keep_given_sizes():
    import memory
    models = small_pair_on_meta()
    cfg = settings.parse_args(["--pair", "small", "--device", "cpu", "--micro-batch", "3"])
    gen, micro, _ = memory.auto_batch_sizes(models, [None, None], cfg, 40 * 2**30)
    assert micro == 3 and 1 <= gen <= 256
    with pytest.raises(MemoryError, match="--gen-batch / --micro-batch auto: 12.0 GiB free"):
        memory.auto_batch_sizes(models, [None, None], cfg, 12 * 2**30)  # 0.86B parameters: 9.6 GiB of states


def test_a_run_with_auto_sizes_uses_and_prints_them(model_dirs, tmp_path, monkeypatch, caplog):
    # a fake free memory on the CPU: room for the tiny models' states, the reserve and a chunk of log-probs
    import memory
    sizes = []
    real = rollout.sample_groups
    monkeypatch.setattr(rollout, "sample_groups", lambda *a, **kw: sizes.append(kw["gen_batch"]) or real(*a, **kw))
    monkeypatch.setattr(memory, "free_bytes", lambda device: 4 * 2**30)
    with caplog.at_level("INFO", logger="graft_min"):
        run(model_dirs, tmp_path / "run", "--steps", "1", "--gen-batch", "auto", "--micro-batch", "auto")
    line, = [r.getMessage() for r in caplog.records if r.getMessage().startswith("auto sizes")]
    gen = int(line.split("--gen-batch ")[1].split(",")[0])
    assert sizes and set(sizes) == {gen} and 1 <= gen <= 6 * 4  # at most a step's 6 prompts x 4
    assert "--micro-batch" in line and "GiB free" in line
    assert runlog_config(tmp_path / "run")["gen_batch"] == "auto"  # the folder records what was asked


def runlog_config(out):
    import runlog
    return runlog.read_json(out / "config.json")
