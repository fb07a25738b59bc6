"""bench/gpu_check.sh, the one device call a lent GPU gets, tried on the CPU first (issue 46): prepared by
bench/prepare_gpu_check.sh as for a card, the carried stack imports with nothing of this environment's packages but
torch and what torch needs (the device image brings those), and `DEVICE=cpu TOY=1 bash bench/gpu_check.sh` ends every
stage with rc 0, its figures printed and its JSON written. No wall time is asserted: the stages' time-outs are a card's,
scaled here by LIMIT_SCALE into guards against a hang that a slow CPU or a busy machine stays far below (issue 56).

The scripts run in a copy of the repository made of links (their .whl/ and .device/ land there, not here), with the
cache of this checkout; the carried wheels are for this Python (PYVER), not the device image's 3.12."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest

from machinery import wheels

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"
STAGES = ("tiny", "bench_gpu", "bench_small", "bench_small_22gib")
LIMIT_SCALE = 5  # the card's 90 + 180 + 140 + 110 s become 43 minutes in all: hang guards, not timings


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    for name in os.listdir(ROOT):
        if name.endswith(".py") or name in ("requirements.txt", "bench", "tiny_pair", "machinery", "experiments"):
            os.symlink(os.path.join(ROOT, name), root / name)
    env = {**os.environ, "PYVER": PYVER, "GRAFT_MIN_CACHE": wheels.default_cache_dir(),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", "bench/prepare_gpu_check.sh"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return root, env


def test_the_carried_stack_imports_beside_torch_alone(prepared, tmp_path):
    root, env = prepared
    names = sorted(os.listdir(root / ".whl"))
    assert any(n.startswith("transformers-5.25.0-") for n in names) and any(n.startswith("httpx2-") for n in names)
    assert not any(n.startswith(("numpy-", "torch-")) for n in names)  # the image's own
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    *[str(root / ".whl" / n) for n in names]], check=True, capture_output=True)
    # "the image": torch and the packages torch requires (and numpy), linked into a folder of their own
    image = tmp_path / "image"
    image.mkdir()
    wanted = {"torch", "numpy"} | {re.split(r"[ ;<>=!~\[]", r)[0].lower().replace("-", "_")
                                   for r in importlib.metadata.requires("torch") or [] if "extra ==" not in r}
    for dist in importlib.metadata.distributions():
        if dist.metadata["Name"].lower().replace("-", "_") in wanted:
            info = str(dist._path)  # its .dist-info folder: transformers checks versions through importlib.metadata
            os.symlink(info, image / os.path.basename(info))
            top = (dist.read_text("top_level.txt") or dist.metadata["Name"].replace("-", "_")).split()
            for name in top:
                for candidate in (name, name + ".py"):
                    path = os.path.join(str(dist.locate_file("")), candidate)
                    if os.path.exists(path) and not os.path.exists(image / candidate):
                        os.symlink(path, image / candidate)
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import transformers, tokenizers, huggingface_hub, "
            "math_verify, safetensors, regex; from transformers import AutoModelForCausalLM, AutoTokenizer; "
            "print(transformers.__version__, transformers.__file__)")
    done = subprocess.run([sys.executable, "-S", "-c", code, str(site), str(image)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]  # -S: no site-packages but these two folders
    version, path = done.stdout.split()
    assert version == "5.25.0" and path.startswith(str(site))


def test_the_gpu_check_runs_every_stage_on_a_cpu(prepared, tmp_path):
    root, env = prepared
    out = tmp_path / "out"
    done = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=root, capture_output=True, text=True, timeout=2700,
                          env={**env, "DEVICE": "cpu", "TOY": "1", "OUT": str(out), "SITE": str(tmp_path / "site"),
                               "LIMIT_SCALE": str(LIMIT_SCALE)})
    report = (out / "gpu.txt").read_text()
    assert "does not import here" not in report, report  # the carried stack ran, not the environment's
    assert "transformers 5.25.0 from " + str(tmp_path / "site") in report
    for name in STAGES:  # rc 124 would be the scaled time-out: a hang
        line = re.search(rf"## {name}: rc=(\d+) in \d+ s \(limit \d+ s\)", report)
        assert line and line.group(1) == "0", (name, report, done.stderr[-3000:])
    assert "held-out pass@1" in (out / "tiny.txt").read_text()
    gpu_bench_figures(out)
    for name, cap in (("bench_small", None), ("bench_small_22gib", 22)):
        printed = (out / f"{name}.txt").read_text()
        assert "a: sampled" in printed and "b: updated on" in printed and "100 steps at the last step's pace" in printed
        result = json.loads((out / f"{name}.json").read_text())
        assert len(result["steps"]) == 1 and result["config"].get("memory_gib") == cap
        assert (result["config"]["bf16_sampler"], result["config"]["fused_adamw"]) == (True, True)


def gpu_bench_figures(out):
    """bench/bench_gpu.py's every section at its toy size (continuous batching aside), as stage bench_gpu ran it: on
    the CPU with the real tokenizers and the tiny pair."""
    import torch
    printed, result = (out / "bench_gpu.txt").read_text(), json.loads((out / "bench_gpu.json").read_text())
    assert result["stack"]["torch"] == torch.__version__
    assert result["copy_gb_s"] > 0 and result["bf16_tflop_s"] > 0 and "ceilings: copy" in printed
    for label in ("Qwen2.5-0.5B", "SmolLM2-360M"):
        decode = result["decode"][label]
        assert set(decode) == {"fp32+autocast", "bf16", "bf16+static"}
        assert all(isinstance(v, dict) and all(ms > 0 for ms in v.values()) for v in decode.values()), decode
        assert f"{label}: K cache dtype: fp32+autocast float32, bf16 bfloat16" in printed
        assert f"{label}: ms per decode step at batch 4" in printed
        assert f"profile of one decode step, {label}, bf16" in printed and "scaled_dot_product" in printed
        # sampled from the bf16 copy, scored by the fp32 master under autocast: close, not equal
        g = result["gap"][label]
        assert g["tokens"] == 4 * 6 * 4 and 0 < g["mean_abs"] < 0.05
        micro = [r["micro_batch"] for r in result["update"][label]]
        assert micro[0] == 2 and micro[1] >= 1 and all(r["tokens_per_s"] > 0 for r in result["update"][label])
    for m in "ab":  # the warm-started tiny pair: trained weights
        assert result["gap_tiny"][m]["tokens"] > 100 and result["gap_tiny"][m]["mean_abs"] < 0.05
