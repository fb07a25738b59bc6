"""What a GPU changes (DESIGN.md "On a GPU", issues 37 and 46), exercised on the CPU with the tiny random models:
sampling from a bf16 copy that follows the fp32 master weights after every optimizer step and after a
resume, that samples softmax(logits / T) of the copy while the master scores; fused AdamW, kept fused on resume;
`auto` batch sizes; a run that leaves nothing behind. Every one of these runs on the CPU when asked for.
The lines only a card runs (memory.free_bytes / cap_memory / release, settings.software_stack's card name) are run
here with the CUDA driver's entry points stubbed (torch._C's functions, lazy init, mem_get_info, the allocator's
counters) and torch's own Python layer real: its argument checks are what failed on a card (issue 46).

Rewards come from a hash of the text (as in test_loop.py), so that groups mix and GRAFT exchanges."""

import copy
import gc
import logging
import os
import warnings
import weakref
import zlib

import pytest
import torch

import graft_min
import rollout
from machinery import pairs, settings
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


def test_the_gpu_features_are_the_presets_choice_on_any_device():
    for pair, wanted in (("small", True), ("paper1", True), ("tiny", False), ("cpu", False), ("coder", False)):
        for device in ("cpu", "cuda"):
            cfg = settings.parse_args(["--pair", pair, "--device", device])
            assert (cfg.bf16_sampler, cfg.fused_adamw) == (wanted, wanted), (pair, device)
    cfg = settings.parse_args(["--pair", "small", "--no-bf16-sampler", "--no-fused-adamw"])
    assert (cfg.bf16_sampler, cfg.fused_adamw) == (False, False)
    assert settings.parse_args(["--pair", "small"]).max_prompt_tokens == 512  # what machinery/memory.py's estimate assumes
    assert settings.parse_args(["--pair", "paper1"]).max_prompt_tokens == 2048  # the paper's (App. B)


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
    run(model_dirs, out, "--steps", "2", "--bf16-sampler")
    steps = 2 * 2 * 2  # 2 steps x 2 minibatches x 2 models: one refresh after each optimizer step
    assert len(refreshes) == steps and checks and all(checks)
    assert len(checks) == 2 * (2 + 3 * 4)  # per model: 2 rollouts, 3 evaluations (steps 0, 1, 2) of 4 families
    trained = {pol.name: copy.deepcopy(pol.sampler.state_dict()) for pol in made}
    # resume: the fresh copies are made from the loaded weights before anything samples
    made.clear(), checks.clear(), refreshes.clear()
    run(model_dirs, out, "--steps", "3", "--resume", "--bf16-sampler")
    assert len(checks) == 2 * (1 + 4) and all(checks)  # per model: step 2's rollout, its evaluation
    assert len(refreshes) == 2 + 2 * 2  # one per loaded model, then one per optimizer step
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    for pol in made:
        assert copy_is_cast_master(pol)
        assert all(torch.equal(p, ckpt["models"][pol.name][n]) for n, p in pol.model.state_dict().items())
        # and the copy did move with training: step 2's weights are not step 2's start
        assert any(not torch.equal(v, pol.sampler.state_dict()[k]) for k, v in trained[pol.name].items())


def test_adamw_is_fused_when_asked_and_stays_fused_when_a_checkpoint_of_an_unfused_run_is_resumed(model_dirs):
    cfg = settings.parse_args(["--model-a", model_dirs[0], "--model-b", model_dirs[1], "--device", "cpu"])
    plain = pairs.make_policy("a", model_dirs[0], 1e-3, cfg)
    fused = pairs.make_policy("a", model_dirs[0], 1e-3, settings.parse_args(["--device", "cpu", "--fused-adamw"]))
    assert plain.opt.defaults["fused"] is None and fused.opt.defaults["fused"] is True  # a real fused AdamW, on a CPU
    for p in plain.model.parameters():  # one step of the unfused run, so that its state holds step counts and moments
        p.grad = torch.ones_like(p)
    plain.opt.step()
    state = plain.opt.state_dict()
    assert state["param_groups"][0]["fused"] is None
    # torch's own load takes the saved group's settings: the resumed optimizer would silently run unfused
    unfused_again = copy.deepcopy(fused.opt)
    unfused_again.load_state_dict(state)
    assert unfused_again.param_groups[0]["fused"] is None
    pairs.load_optimizer(fused.opt, state)
    assert fused.opt.param_groups[0]["fused"] is True and fused.opt.param_groups[0]["foreach"] is None
    p = next(fused.model.parameters())
    assert fused.opt.state[p]["step"].dtype == torch.float32 and fused.opt.state[p]["step"].device == p.device
    for q in fused.model.parameters():
        q.grad = torch.ones_like(q)
    fused.opt.step()  # the fused kernel runs on the loaded state
    assert float(fused.opt.state[p]["step"]) == 2.0


def test_a_model_made_for_rl_is_freed_when_dropped_without_the_cyclic_collector(model_dirs):
    """pairs.autocast_bf16 once stored a bound method on the instance: model -> __dict__ -> wrapper -> model, a cycle
    that only the cyclic collector frees. compare runs GRAFT after GRPO in one process: GRPO's weights must be gone."""
    cfg = settings.parse_args(["--device", "cpu", "--dtype", "bfloat16", "--bf16-sampler", "--fused-adamw",
                               "--grad-checkpointing"])
    gc.collect()
    gc.disable()
    try:
        pol = pairs.make_policy("a", model_dirs[0], 1e-3, cfg)
        assert pol.model.autocast_dtype == torch.bfloat16 and pol.sampler is not None
        refs = [weakref.ref(pol.model), weakref.ref(pol.sampler), weakref.ref(pol.opt)]
        del pol
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()


def models_alive():
    """Every transformers model object there is, reachable or not (gc.get_objects also holds the garbage that only
    the cyclic collector would free)."""
    from transformers import PreTrainedModel
    with warnings.catch_warnings():  # isinstance on torch.distributed's deprecated reduce_op object warns
        warnings.simplefilter("ignore", FutureWarning)
        return {id(o): type(o).__name__ for o in gc.get_objects() if isinstance(o, PreTrainedModel)}


def test_a_run_leaves_no_model_behind_without_the_cyclic_collector(model_dirs, tmp_path):
    gc.collect()
    before = models_alive()
    gc.disable()
    try:
        cfg = settings.parse_args(["--prompts-per-step", "4", "--n", "4", "--max-new-tokens", "6", "--steps", "1",
                                   "--eval-problems", "2", "--eval-samples", "1", "--minibatches", "2", "--device", "cpu",
                                   "--dtype", "bfloat16", "--bf16-sampler", "--fused-adamw", "--grad-checkpointing",
                                   "--model-a", model_dirs[0], "--model-b", model_dirs[1], "--out", str(tmp_path / "r")])
        graft_min.run(cfg, "graft", str(tmp_path / "r"))
        left = [name for i, name in models_alive().items() if i not in before]
    finally:
        gc.enable()
    assert left == []


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
    from machinery import memory
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
    from machinery import memory
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
    from machinery import memory
    models = small_pair_on_meta()
    cfg = settings.parse_args(["--pair", "small", "--device", "cpu", "--micro-batch", "3"])
    gen, micro, _ = memory.auto_batch_sizes(models, [None, None], cfg, 40 * 2**30)
    assert micro == 3 and 1 <= gen <= 256
    with pytest.raises(MemoryError, match="--gen-batch / --micro-batch auto: 12.0 GiB free"):
        memory.auto_batch_sizes(models, [None, None], cfg, 12 * 2**30)  # 0.86B parameters: 9.6 GiB of states


def test_a_run_with_auto_sizes_uses_and_prints_them(model_dirs, tmp_path, monkeypatch, caplog):
    # --memory-gib: plan for 4 GiB in all, whatever the machine has free (room for the tiny models' states, the
    # reserve and a chunk of log-probs)
    sizes = []
    real = rollout.sample_groups
    monkeypatch.setattr(rollout, "sample_groups", lambda *a, **kw: sizes.append(kw["gen_batch"]) or real(*a, **kw))
    with caplog.at_level("INFO", logger="graft_min"):
        run(model_dirs, tmp_path / "run", "--steps", "1", "--gen-batch", "auto", "--micro-batch", "auto",
            "--memory-gib", "4")
    line, = [r.getMessage() for r in caplog.records if r.getMessage().startswith("auto sizes")]
    gen = int(line.split("--gen-batch ")[1].split(",")[0])
    assert sizes and set(sizes) == {gen} and 1 <= gen <= 6 * 4  # at most a step's 6 prompts x 4
    assert "--micro-batch" in line and "GiB free" in line and float(line.split("(")[1].split(" GiB")[0]) <= 4
    config = runlog_config(tmp_path / "run")
    assert config["gen_batch"] == "auto" and config["sizes"]["gen_batch"] == gen  # what was asked, what it measured


def test_grad_split_is_counted_in_the_auto_budget():
    from machinery import memory
    models = small_pair_on_meta()
    n = sum(p.numel() for m in models for p in m.parameters())
    free = 40 * 2**30
    plain = memory.auto_batch_sizes(models, [1, 1], settings.parse_args(["--pair", "small"]), free)[2]
    split = memory.auto_batch_sizes(models, [1, 1], settings.parse_args(["--pair", "small", "--grad-split"]), free)[2]
    # gradient_split keeps one fp32 copy of the gradient, 4 bytes a parameter
    assert (plain["budget_gib"] - split["budget_gib"]) * 2**30 == pytest.approx(4 * n)


# ---------------------------------------------------------------- the lines only a card runs, its driver stubbed

class FakeDriver:
    """The CUDA driver's entry points as torch's Python layer calls them, on a CPU build: one card of `total` bytes,
    `free` of them free, the allocator holding `reserved` bytes of which `allocated` are in use."""

    def __init__(self, monkeypatch, total=80 * 2**30, free=60 * 2**30, reserved=6 * 2**30, allocated=4 * 2**30,
                 fraction=1.0):
        self.total, self.free, self.reserved, self.allocated, self.fraction = total, free, reserved, allocated, fraction
        self.calls = []
        stub = [(torch.cuda, "_lazy_init", lambda: None), (torch.cuda.memory, "_lazy_init", lambda: None),
                (torch._C, "_cuda_getDevice", lambda: 0), (torch._C, "_cuda_getDeviceCount", lambda: 1),
                (torch._C, "_cuda_getMemoryFraction", self.get_fraction),
                (torch._C, "_cuda_setMemoryFraction", self.set_fraction),
                (torch._C, "_cuda_emptyCache", lambda: self.calls.append("empty_cache")),
                (torch.cuda, "_get_device_properties", self.properties),
                (torch.cuda, "mem_get_info", self.mem_get_info),
                (torch.cuda, "memory_allocated", lambda device=None: self.counter("allocated", device)),
                (torch.cuda, "memory_reserved", lambda device=None: self.counter("reserved", device))]
        for owner, name, fn in stub:
            monkeypatch.setattr(owner, name, fn, raising=False)

    def get_fraction(self, index):
        assert isinstance(index, int), index  # what torch's own argument handling hands the driver
        self.calls.append(("get_fraction", index))
        return self.fraction

    def set_fraction(self, fraction, index):
        assert isinstance(index, int) and isinstance(fraction, float), (fraction, index)
        self.calls.append(("set_fraction", fraction, index))
        self.fraction = fraction

    def properties(self, index):
        assert isinstance(index, int), index
        return type("Props", (), {"name": "Fake H100", "total_memory": self.total})()

    def mem_get_info(self, device=None):
        self.calls.append(("mem_get_info", device))
        return self.free, self.total

    def counter(self, what, device):
        self.calls.append((what, device))
        return getattr(self, what)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")])
def test_free_bytes_on_a_card_with_the_driver_stubbed(monkeypatch, device):
    from machinery import memory
    driver = FakeDriver(monkeypatch)
    # 60 GiB free on the card, plus 2 GiB cached by torch's allocator but unused; no cap
    assert memory.free_bytes(device) == 62 * 2**30
    assert ("get_fraction", 0) in driver.calls  # "cuda" became the current device's index before the driver saw it
    driver.fraction = 0.25  # a 20 GiB cap, 4 GiB of it allocated
    assert memory.free_bytes(device) == 16 * 2**30


def test_a_memory_cap_on_a_card_with_the_driver_stubbed(monkeypatch):
    from machinery import memory
    driver = FakeDriver(monkeypatch)
    assert memory.cap_memory("cuda", 22) == pytest.approx(22 / 80)
    assert driver.calls[-1] == ("set_fraction", 22 / 80, 0)
    assert memory.free_bytes("cuda") == 22 * 2**30 - 4 * 2**30  # the cap less what is allocated
    assert memory.cap_memory("cuda:0", 100) == 1.0  # never more than the card


def test_the_small_preset_on_a_stubbed_card_with_a_cap_gets_the_cards_sizes(monkeypatch):
    """resolve_auto_sizes on "cuda" (the default device on a GPU machine), --memory-gib 22 on an 80 GiB card: the
    allocator is capped, and the sizes are those of a 22 GiB card less what the models hold."""
    from machinery import memory
    models = small_pair_on_meta()
    policies = [pairs.Policy(name, m, None, None, sampler=pairs.bf16_copy(m)) for name, m in zip("ab", models)]
    driver = FakeDriver(monkeypatch, free=74 * 2**30, reserved=0, allocated=0)
    cfg = settings.parse_args(["--pair", "small", "--device", "cuda", "--memory-gib", "22"])
    memory.resolve_auto_sizes(cfg, policies)
    assert ("set_fraction", 22 / 80, 0) in driver.calls
    held = memory.held_bytes(policies)
    n = sum(p.numel() for m in models for p in m.parameters())
    assert 6 * n <= held < 6 * n + 2**20  # fp32 masters and bf16 copies (on meta), and RoPE's buffers
    gen, micro, _ = memory.auto_batch_sizes(models, [1, 1], cfg, 22 * 2**30 - held)
    assert (cfg.gen_batch, cfg.micro_batch) == (gen, micro) and micro < 64


def test_releasing_a_run_empties_the_cache_on_a_card_only(monkeypatch):
    from machinery import memory
    driver = FakeDriver(monkeypatch)
    monkeypatch.setattr(torch.cuda, "_initialized", True)  # torch.cuda.empty_cache asks the driver only then
    memory.release("cpu")
    assert "empty_cache" not in driver.calls
    memory.release("cuda")
    assert driver.calls == ["empty_cache"]


def test_each_torchrun_rank_takes_its_own_card(monkeypatch):
    from machinery import ddp
    FakeDriver(monkeypatch)
    chosen = []
    monkeypatch.setattr(torch._C, "_cuda_setDevice", lambda index: chosen.append(index), raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert ddp.rank_device() == "cuda:1" and chosen == [1]


def test_prompts_over_the_limit_are_dropped_with_a_count(char_tok_a, char_tok_b, caplog):
    from machinery import tasks
    problems = [tasks.Problem(f"p{i}", "add", "Q:" + "1" * i + "=", "0") for i in (3, 7, 12)]  # 6, 10, 15 characters
    heldout = {"add": problems[:2], "mul": problems[2:]}
    with caplog.at_level("WARNING", logger="graft_min"):
        train, kept = tasks.fit_prompts(problems, heldout, [char_tok_a, char_tok_b], 10)
    # one id a character with these tokenizers, no template: 6, 10 and 15 tokens; 10 is not over the limit
    assert [p.id for p in train] == ["p3", "p7"] and kept == {"add": problems[:2], "mul": []}
    assert [r.getMessage() for r in caplog.records] == [
        "--max-prompt-tokens 10: dropped 1 of 3 train prompts longer than that",
        "--max-prompt-tokens 10: dropped 1 of 1 mul prompts longer than that"]
    with pytest.raises(tasks.BadData, match="--max-prompt-tokens 4: every training prompt is longer"):
        tasks.fit_prompts(problems, heldout, [char_tok_a], 4)


def test_the_benches_card_lines_with_the_driver_stubbed(monkeypatch):
    """bench/gpu_check.sh's stages on a card: bench_small's peak memory and bench_gpu's synchronisation."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import bench_gpu
    import bench_small
    FakeDriver(monkeypatch)
    synced = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "_exchange_device", lambda index: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "_maybe_exchange_device", lambda index: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: synced.append(1), raising=False)
    assert bench_small.peak_mib("cuda") == 3 * 1024
    bench_gpu.sync("cuda")
    bench_gpu.sync("cpu")
    assert synced == [1]


def test_a_run_records_the_cards_name(monkeypatch):
    FakeDriver(monkeypatch)
    assert settings.software_stack("cuda")["cuda_device"] == "Fake H100"
    assert "cuda_device" not in settings.software_stack("cpu")


def runlog_config(out):
    from machinery import runlog
    return runlog.read_json(out / "config.json")
