"""bench/bench_small.py: the `small` pair's architectures at their published sizes, and a GRAFT step of the
bench at its toy size on the CPU (the real tokenizers of the fetched models, no hub)."""

import json
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import bench_small  # noqa: E402


def n_params(config):
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    return type(model).__name__, sum(p.numel() for p in model.parameters())


def test_the_configs_build_the_published_models():
    # the parameter counts the model cards give: Qwen2.5-0.5B 0.49B (494,032,768), SmolLM2-360M 362M (361,821,120)
    assert n_params(bench_small.QWEN25_05B) == ("Qwen2ForCausalLM", 494_032_768)
    assert n_params(bench_small.SMOLLM2_360M) == ("LlamaForCausalLM", 361_821_120)


def test_toy_bench_runs_a_graft_step_with_the_real_tokenizers(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rows = bench_small.main(["--toy", "--steps", "1", "--device", "cpu", "--threads", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "Qwen2.5-0.5B" in printed and "100 steps at the last step's pace" in printed
    (row,) = rows
    cfg = json.loads(out.read_text())["config"]
    assert (cfg["prompts_per_step"], cfg["n"], cfg["max_new_tokens"], cfg["dtype"], cfg["grad_checkpointing"]) == (
        4, 4, 8, "bfloat16", True)
    # random weights: both models sample every response to its full length (the bench's worst case)
    assert row["generated_tokens"] == 2 * 4 * 4 * 8
    assert row["exchanged"] > 0 and row["graft"] > 0  # the hash rewards mix groups: peer texts were scored
    assert all(row[k] > 0 for k in ("generate", "score", "update", "peak_mib"))
    assert row["update_tokens"] > 0


def test_the_committed_auto_sizes_are_what_the_bench_prints(capsys):
    # docs/real_models.md quotes results/auto_sizes_small.txt: the small preset's auto sizes on 24-141 GiB cards
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "results", "auto_sizes_small.txt")) as f:
        committed = [line for line in f.read().splitlines() if not line.startswith("#")]
    bench_small.main(["--device", "cpu", "--auto-sizes", "24,40,80,141"])
    assert capsys.readouterr().out.splitlines() == committed
    assert "  24 GiB card: --gen-batch 66, --micro-batch 9 " in "\n".join(committed)
