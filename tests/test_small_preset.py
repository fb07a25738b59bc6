"""`python graft_min.py --pair small`, the command this project is for, end to end on the CPU (issue 46).

Its exact flag set, the preset's own (compare: GRPO then GRAFT in one process; bf16 autocast over fp32 masters;
gradient checkpointing; sampling from bf16 copies; `auto` batch sizes; fused AdamW; prompts up to 512 tokens), on
random-weight models of its two architectures (bench_small's published Qwen2.5-0.5B and SmolLM2-360M configs,
shrunk to 2 narrow layers) with the real tokenizers and chat templates (those of the fetched Qwen2.5-Coder-0.5B and
SmolLM2-135M: the same vocabularies), MATH-format files for the training set and the five benchmarks. Only the
sizes are toy: 4 prompts x 4 responses of 32 tokens, 2 steps, then a resume to 3. --memory-gib plays the free
memory, so that the `auto` micro-batch is set by the budget (3, under the minibatch's 4); rollout.CHUNK_ELEMENTS is
lowered to 2**21 so that every scoring and update pass takes its log-probs in chunks of positions, as the real
sizes do (2 x 1024 x 151,936 elements a micro-batch).

Random weights never write a boxed answer, so rewards come from a hash of the text (as in bench_small): groups mix.
Whether GRAFT then finds a group to exchange in so few prompts is chance, so the receiver's side of an exchange
(graft_groups: re-tokenise, score under bf16 autocast in chunks, weigh) is run once more on the run's own texts."""

import json
import os
import sys
import zlib

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import bench_small  # noqa: E402
import graft_min  # noqa: E402
import loss  # noqa: E402
import rollout  # noqa: E402
from machinery import memory  # noqa: E402
from machinery import pairs  # noqa: E402
from machinery import runlog  # noqa: E402
from machinery import settings  # noqa: E402
from machinery import tasks  # noqa: E402

GiB = 2**30
TOY = ["--prompts-per-step", "4", "--n", "4", "--max-new-tokens", "32", "--eval-problems", "1", "--eval-samples", "1",
       "--eval-every", "10", "--ckpt-every", "1"]
MICRO = 3  # the `auto` micro-batch --memory-gib leaves room for: under a minibatch's 4 x 4 / 4 sequences


def hash_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    toks = bench_small.tokenizer_dirs()
    for name, config, tok in (("a", bench_small.QWEN25_05B, toks[0]), ("b", bench_small.SMOLLM2_360M, toks[1])):
        bench_small.build(config, tok, str(root / name), toy=True, seed=ord(name))
    return str(root / "a"), str(root / "b")


@pytest.fixture(scope="module")
def math_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("math")
    train = [{"problem": f"What is {i} + {i + 1}?", "solution": f"$\\boxed{{{2 * i + 1}}}$"} for i in range(16)]
    train.append({"problem": "Simplify " + " + ".join(f"x_{{{i}}}" for i in range(300)) + ".",  # ~2,000 tokens
                  "solution": "$\\boxed{0}$"})
    files = {"train": write_jsonl(root / "train.jsonl", train)}
    for name in tasks.BENCHMARKS:
        field = tasks.SOURCES[name].question
        files[name] = write_jsonl(root / f"{name}.jsonl", [{field: f"What is {i} * 3?", "answer": str(3 * i)}
                                                           for i in range(2)])
    return files


def small_flags(small_models, math_files, out, memory_gib, *extra):
    return ["--pair", "small", "--device", "cpu", "--model-a", small_models[0], "--model-b", small_models[1],
            "--train-data", math_files["train"],
            *[f for name in tasks.BENCHMARKS for f in ("--eval-data", f"{name}={math_files[name]}")],
            *TOY, "--memory-gib", str(memory_gib), "--out", str(out), *extra]


def budget_for_micro(small_models, cfg, micro):
    """--memory-gib under which memory.auto_batch_sizes gives this micro-batch: the models and their copies, the
    gradients and AdamW states, the 1 GiB reserve, a chunk of log-probs, and micro + 1/2 sequences of the update."""
    policies = [pairs.make_policy(name, path, 1e-6, cfg) for name, path in zip("ab", small_models)]
    n = sum(p.numel() for pol in policies for p in pol.model.parameters())
    per_update = max(memory.update_bytes(p.model, cfg.max_new_tokens, True, cfg.max_prompt_tokens) for p in policies)
    total = memory.held_bytes(policies) + 12 * n + GiB + 16 * rollout.CHUNK_ELEMENTS + (micro + 0.5) * per_update
    return total / GiB


def test_the_small_presets_flags_run_end_to_end_on_a_cpu_and_resume(small_models, math_files, tmp_path, monkeypatch,
                                                                      caplog):
    monkeypatch.setattr(graft_min, "reward", hash_reward)
    monkeypatch.setattr(rollout, "CHUNK_ELEMENTS", 2**21)
    out = tmp_path / "small"
    cfg = settings.parse_args(small_flags(small_models, math_files, out, 1))
    # the preset's own settings, none of them given here
    assert (cfg.method, cfg.dtype, cfg.grad_checkpointing, cfg.bf16_sampler, cfg.fused_adamw, cfg.gen_batch,
            cfg.micro_batch, cfg.minibatches, cfg.max_prompt_tokens, cfg.data) == (
        "compare", "bfloat16", True, True, True, "auto", "auto", 4, 512, "math")
    gib = budget_for_micro(small_models, cfg, MICRO)
    with caplog.at_level("INFO", logger="graft_min"):
        graft_min.main(small_flags(small_models, math_files, out, gib, "--steps", "2"))
    logged = [r.getMessage() for r in caplog.records]
    configs = {m: runlog.read_json(out / m / "config.json") for m in ("grpo", "graft")}
    # both methods sample with the same sizes: GRPO measured them, GRAFT took them from GRPO's folder
    sizes = configs["grpo"]["sizes"]
    assert configs["graft"]["sizes"] == sizes and sizes["micro_batch"] == MICRO and 1 <= sizes["gen_batch"] <= 16
    assert configs["grpo"]["gen_batch"] == configs["graft"]["gen_batch"] == "auto"
    measured = f"--gen-batch {sizes['gen_batch']}, --micro-batch {MICRO}"
    assert sum(line.startswith(f"auto sizes on cpu: {measured}") for line in logged) == 1
    assert MICRO * 32 * 49_152 > rollout.CHUNK_ELEMENTS  # both models' log-probs went in chunks
    # the prompt over --max-prompt-tokens 512 was dropped, with a count, in both runs
    assert sum("--max-prompt-tokens 512: dropped 1 of 17 train prompts" in line for line in logged) == 2
    # the same step-0 groups for both methods: every response of both models
    steps0 = {m: [r for r in runlog.read_jsonl(out / m / "trajectories.jsonl") if r["step"] == 0]
              for m in ("grpo", "graft")}
    assert len(steps0["grpo"]) == 2 * 4 and steps0["grpo"] == steps0["graft"]
    assert all(len(r["texts"]) == 4 and all(r["texts"]) for r in steps0["grpo"])
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == {"grpo", "graft"}
    # resume both methods to step 3: the recorded sizes again, not a new measurement
    caplog.clear()
    with caplog.at_level("INFO", logger="graft_min"):
        graft_min.main(small_flags(small_models, math_files, out, gib, "--steps", "3", "--resume"))
    logged = [r.getMessage() for r in caplog.records]
    assert not any(line.startswith("auto sizes on") for line in logged)
    assert sum(line.startswith("auto sizes as ") and measured in line for line in logged) == 2
    for m in ("grpo", "graft"):
        assert [r["step"] for r in runlog.read_jsonl(out / m / "metrics.jsonl")] == [0, 0, 1, 1, 2, 2]
    # the receiver's side of an exchange under these settings: A's step-0 texts into B
    cfg = settings.parse_args(small_flags(small_models, math_files, out, gib))
    cfg.gen_batch, cfg.micro_batch = sizes["gen_batch"], MICRO
    pol = pairs.make_policy("b", small_models[1], 1e-6, cfg)
    a_groups = [r for r in steps0["grpo"] if r["model"] == "a"]
    problems = {p.id: p for p in tasks.load_math_train(math_files["train"])}
    batch = [problems[r["prompt_id"]] for r in a_groups]
    ro, _ = graft_min.rollout_groups(pol, batch, cfg, step=0)
    texts = [t for r in a_groups for t in r["texts"]]
    src = graft_min.Groups(texts, [f for r in a_groups for f in r["finished"]],
                           torch.tensor([x for r in a_groups for x in r["mean_logprobs"]]),
                           torch.tensor([[1.0, 0, 0, 0]] * len(a_groups)))
    recv_ids = rollout.retokenize(texts[:8], src.finished[:8], pol.tok)
    # the toy models' texts take more of B's tokens than A's: a budget that holds them (past it: dropped, test_loop)
    cfg.max_new_tokens = max(map(len, recv_ids))
    rows, s = graft_min.graft_groups(pol, ro, src, [0, 1], cfg)
    with torch.no_grad():
        lp, mask = rollout.token_logprobs(pol.model, [ro.prompt_ids[i // 4] for i in range(8)], recv_ids,
                                          pol.tok.pad_token_id, micro_batch=MICRO)  # as graft_groups batches them
    recv_mean = loss.mean_logprob(lp, mask)
    assert s == pytest.approx(torch.exp(recv_mean - src.mean_logprobs[:8]).tolist(), rel=1e-5)  # Eq. 7
    kept = [j for j in range(8) if s[j] > 0.8]
    assert [r.response_ids for r in rows] == [recv_ids[j] for j in kept]
    for r, j in zip(rows, kept):
        assert r.peer and r.weight == pytest.approx(min(s[j], 1.0)) and torch.equal(r.old_logprobs, lp[j][mask[j]].float())
