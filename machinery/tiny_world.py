"""
The tiny world: two families of column arithmetic, and the two tiny models that train in it
(a CPU-sized stand-in for the paper's MATH and its 1.7B-3B pairs, Sec. 5.1).

Traces (column_trace) are worked column by column, units first, each column with its carry:
    add  3-digit + 3-digit    Q:658+375=  ->  8+5=13,5+7+1=13,6+3+1=10 \\boxed{1033}
    mul  2-digit x 1-digit    Q:47*6=     ->  7*6=42,4*6+4=28 \\boxed{282}
Each family has one systematic wrong habit, "drop the first carry" (Problem.habit). A noisy teacher writes
a TinySpec.habits share of a family's warm-start traces with it, so a warm-started model holds the right
and the wrong habit side by side and the reward separates them. make_world splits each family once
(seeded) into train (warm-start and RL prompts) and held-out (evaluation only) problems.

The tiny pair (pair_specs): a Llama-style A and a GPT-2-style B of different sizes, built from transformers
configs, each with its own character-level tokenizer (other ids, so transfer goes through text);
warm-started by a short supervised pass, saved with save_pretrained and loaded with from_pretrained
(pairs.load_policy), as real models are. pair_seed k (graft_min.py's --seed) is pair k of a world.

Pairs 0-4 of the main job's world (SHIPPED_SPECS; pair 0 is TINY) ship in tiny_pair/ with a MANIFEST.json
and load after every file's sha256 is checked, with no warm-start, so every CPU starts RL from the same
weights (docs/decisions.md#shipped-tiny-pairs-instead-of-a-warm-start-on-load). Other specs are
warm-started once and cached.

    python -m machinery.tiny_world build          warm-start the shipped pairs from scratch, write tiny_pair/
    python -m machinery.tiny_world build --check  the same, compared file by file with tiny_pair/ instead
    python -m machinery.tiny_world --report       the pair (shipped or cached; --seed, world knobs) and its
                                                  world report (world_report)
"""

import argparse
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

import loss
import rollout
from verifier import reward
from machinery import memory
from machinery.pairs import default_cache_dir, load_policy
from machinery.tasks import Problem, encode_prompt
from machinery.wheels import ROOT, ChecksumMismatch, sha256_of, share_modes

log = logging.getLogger("graft_min")

# ---------------------------------------------------------------- problems, traces and habits

def column_trace(a, b, op, drop_first_carry=False, narrate=False):
    """(trace, the answer it ends in): a (op) b worked column by column from the units up, each column with
    its carry: add 2658+4375 -> 8+5=13,5+7+1=13,6+3+1=10,2+4+1=7 \\boxed{7033}; mul 347*6 -> 7*6=42,4*6+4=28,...
    drop_first_carry (the wrong habit): the first non-zero carry is never added to the next column (later
    ones are), and the answer is read off the columns as written.
    narrate (a world knob): each column also says what it writes and carries, 8+5=13 so 3 carry 1,... (with the
    habit 8+5=13 so 3 carry 0,5+7=12 ...): longer traces whose right and wrong versions still differ in the same
    few decisive tokens."""
    bs = str(b)[::-1] if op == "+" else str(b) * len(str(a))  # the second operand's digit per column
    steps, digits, carry, dropped = [], [], 0, not drop_first_carry
    for da, db in zip(str(a)[::-1], bs):
        s = int(da) + int(db) + carry if op == "+" else int(da) * int(db) + carry
        steps.append(f"{da}{op}{db}" + (f"+{carry}" if carry else "") + f"={s}")
        digits.append(s % 10)
        carry = s // 10
        if carry and not dropped:
            carry, dropped = 0, True
        if narrate:
            steps[-1] += f" so {s % 10} carry {carry}"
    answer = int(str(carry or "") + "".join(map(str, digits[::-1])))
    return ",".join(steps) + f" \\boxed{{{answer}}}", answer


def mul_problem(a, b, narrate=False):
    """a (2-digit) x b (1-digit), column by column."""
    solution, answer = column_trace(a, b, "*", narrate=narrate)
    assert answer == a * b
    return Problem(f"mul/{a}*{b}", "mul", f"Q:{a}*{b}=", str(answer), solution,
                   column_trace(a, b, "*", True, narrate)[0])


def add_problem(a, b, narrate=False):
    """a + b (3-digit each), column by column."""
    solution, answer = column_trace(a, b, "+", narrate=narrate)
    assert answer == a + b
    return Problem(f"add/{a}+{b}", "add", f"Q:{a}+{b}=", str(answer), solution,
                   column_trace(a, b, "+", True, narrate)[0])


FAMILIES = {  # family -> (maker, first operand range, second operand range, does the units column carry?)
    "mul": (mul_problem, range(12, 100), range(2, 10), lambda a, b: (a % 10) * b >= 10),
    "add": (add_problem, range(100, 1000), range(100, 1000), lambda a, b: a % 10 + b % 10 >= 10),
}


@dataclass
class World:
    train: dict  # family -> list[Problem]: warm-start examples and RL prompts
    heldout: dict  # family -> list[Problem]: evaluation only

    def train_problems(self):
        return [p for fam in sorted(self.train) for p in self.train[fam]]


def make_world(seed=0, split_carry=False, narrate=False, heldout_per_family=200, max_train_per_family=2000):
    """The two-family world, split (seeded) into train and held-out problems.

    split_carry (a world knob): each family becomes two by whether its units column carries, "add" / "mul"
    (no) and "addc" / "mulc" (yes: the habit drops that carry), so that a teacher can teach the habit on one
    sub-skill only; each sub-family holds out min(heldout_per_family, a third) of its problems (mul without
    a units carry has 182). narrate: column_trace's narrated traces."""
    rng = random.Random(f"tiny-world-{seed}")
    train, heldout = {}, {}
    for fam, (make, first, second, units_carry) in FAMILIES.items():
        size = len(first) * len(second)
        picked = rng.sample(range(size), min(size, heldout_per_family + max_train_per_family))
        pairs_ab = [(first[i // len(second)], second[i % len(second)]) for i in picked]
        if not split_carry:
            problems = [make(x, y, narrate) for x, y in pairs_ab]
            heldout[fam], train[fam] = problems[:heldout_per_family], problems[heldout_per_family:]
            continue
        for sub, carries in ((fam, False), (fam + "c", True)):
            problems = [dataclasses.replace(p, id=sub + p.id[len(fam):], family=sub)
                        for p in (make(x, y, narrate) for x, y in pairs_ab if units_carry(x, y) == carries)]
            k = min(heldout_per_family, len(problems) // 3)
            heldout[sub], train[sub] = problems[:k], problems[k:]
    return World(train, heldout)


def alphabet(narrate=False):
    """Every character the tiny world can contain (tokenizers must cover it exactly)."""
    return sorted(set("0123456789+*=,: Q\\boxed{}" + ("socarry" if narrate else "")))


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
    split_carry: bool = False  # world knob: make_world's sub-families by units carry (add / addc, mul / mulc)
    narrate: bool = False  # world knob: narrated traces (column_trace)

    def key(self):
        spec = dataclasses.asdict(self)
        for knob in ("split_carry", "narrate"):  # left out when False: a spec without the knobs keeps its key
            if not spec[knob]:
                del spec[knob]
        blob = json.dumps({"v": CACHE_VERSION, **spec}, sort_keys=True)
        return f"{self.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def pair_specs(weak_habit=0.9, strong_habit=0.25, split_carry=True, narrate=False, world_seed=0, pair_seed=0):
    """(A, B): mirrored TinySpecs, each model weak where its teacher mostly wrote the wrong habit.

    split_carry True: a quarter of each warm-start per sub-family. A's weak skill is addc, B's mulc (the units
    column carries), taught with the habit weak_habit of the time; the same family without that carry is
    taught clean, and the other family's two sub-families with the habit strong_habit of the time (the peer's
    strong skill). split_carry False: half per family; A's teacher writes the habit into weak_habit of its
    additions and strong_habit of its multiplications, B's the other way round.
    The defaults are the main job's world (docs/decisions.md#the-default-tiny-world).

    pair_seed k (graft_min.py's --seed): pair k of this world, with its own inits and warm-start order
    (TinySpec.seed 1 + 2k for A, 2 + 2k for B); the problems (world_seed) and the tokenizers (tokenizer_seed
    1 and 2) are shared. Pair 0 is TINY; tiny_pair/ ships pairs 0-4 (SHIPPED_SPECS)."""
    if split_carry:
        mix = {"add": 0.25, "addc": 0.25, "mul": 0.25, "mulc": 0.25}
        habits_a = {"add": 0.0, "addc": weak_habit, "mul": strong_habit, "mulc": strong_habit}
        habits_b = {"mul": 0.0, "mulc": weak_habit, "add": strong_habit, "addc": strong_habit}
    else:
        mix = {"mul": 0.5, "add": 0.5}
        habits_a, habits_b = {"add": weak_habit, "mul": strong_habit}, {"mul": weak_habit, "add": strong_habit}
    world = dict(world_seed=world_seed, split_carry=split_carry, narrate=narrate)
    return (TinySpec("tiny-a-llama", "llama", d_model=96, n_layer=3, n_head=4, mix=mix, habits=habits_a,
                     steps=600, batch=64, lr=4e-3, tokenizer_seed=1, seed=1 + 2 * pair_seed, **world),
            TinySpec("tiny-b-gpt2", "gpt2", d_model=80, n_layer=3, n_head=4, mix=dict(mix), habits=habits_b,
                     steps=600, batch=64, lr=4e-3, tokenizer_seed=2, seed=2 + 2 * pair_seed, **world))


def weak_family(spec):
    """The (sub-)family a tiny model's teacher used the wrong habit on most: its weak skill."""
    return max(spec.habits, key=spec.habits.get)


TINY = pair_specs()  # the main job's pair (pair 0): the split world at weak habit 0.9 (docs/tiny_world.md)
SHIPPED_PAIRS = 5  # pairs 0-4 of the main job's world ship in tiny_pair/: experiments/reproduce.py's five seeds
SHIPPED_SPECS = tuple(spec for k in range(SHIPPED_PAIRS) for spec in pair_specs(pair_seed=k))  # A0, B0, A1, B1, ...


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


def warm_start_data(spec, world):
    """The warm-start's examples, one batch a step: (problems, traces) of spec.batch each; families drawn
    by spec.mix, and a spec.habits share of each family's traces carrying its wrong habit (a noisy teacher)."""
    rng = random.Random(f"warm-{spec.seed}")
    families = sorted(spec.mix)
    for _ in range(spec.steps):
        fams = rng.choices(families, weights=[spec.mix[f] for f in families], k=spec.batch)
        probs = [rng.choice(world.train[f]) for f in fams]
        yield probs, [p.habit if rng.random() < spec.habits.get(p.family, 0.0) else p.solution for p in probs]


def warm_start(model, tokenizer, spec, world):
    """Supervised pass on warm_start_data (loss on response tokens), AdamW with warm-up and cosine decay."""
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01)
    warmup = max(1, spec.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, spec.steps) / spec.steps)))
    model.train()
    for probs, traces in tqdm(warm_start_data(spec, world), total=spec.steps, desc=f"warm-start {spec.name}", leave=False):
        prompts = [tokenizer.encode(p.question) for p in probs]
        responses = [tokenizer.encode(t) + [tokenizer.eos_token_id] for t in traces]
        logprobs, mask = rollout.token_logprobs(model, prompts, responses, tokenizer.pad_token_id)
        nll = -(logprobs * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        nll.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    return model


def tiny_tokenizer(spec):
    extra = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if spec.arch == "gpt2" else ""
    return char_tokenizer(alphabet(spec.narrate) + list(extra), shuffle_seed=spec.tokenizer_seed)


# ---------------------------------------------------------------- warm-started models, cached

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
    world = world or make_world(spec.world_seed, spec.split_carry, spec.narrate)
    tokenizer = tiny_tokenizer(spec)
    model = warm_start(build_tiny_model(spec, tokenizer), tokenizer, spec, world)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".building-", dir=os.path.dirname(path))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, "tiny_spec.json"), "w") as f:
        json.dump({"key": spec.key(), **dataclasses.asdict(spec)}, f, indent=1)
    share_modes(tmp)  # mkdtemp's 700 and safetensors' 600 -> the umask's
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


def _build_one(spec, cache_dir):
    torch.set_num_threads(1)  # one core per model: two tiny models warm-start side by side
    return ensure_tiny_model(spec, cache_dir)


def tiny_pair(cache_dir=None, specs=TINY, shipped=None):
    """The model folders of `specs` (default: the main job's pair), in order.

    A spec the shipped manifest lists (SHIPPED_SPECS) is read from tiny_pair/ after its sha256 check
    (shipped_model): no warm-start, no cache. Any other is warm-started on first use and cached
    (ensure_tiny_model; missing ones in parallel, one process a core). shipped: the folder holding the manifest
    (default SHIPPED); False: warm-start every spec (`python -m machinery.tiny_world build`)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    import multiprocessing

    cache_dir = cache_dir or default_cache_dir()
    ready = [shipped_model(spec, shipped) if shipped is not False else None for spec in specs]
    missing = [s for s, path in zip(specs, ready)
               if path is None and not os.path.isdir(os.path.join(cache_dir, "tiny", s.key()))]
    if len(missing) > 1 and (os.cpu_count() or 1) > 1:
        try:
            workers, context = min(len(missing), os.cpu_count()), multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(workers, mp_context=context) as pool:
                list(pool.map(_build_one, missing, [cache_dir] * len(missing)))
        except BrokenProcessPool as e:  # e.g. a script read from stdin cannot be spawned
            log.warning("parallel warm-start failed (%s); building one model after the other", e)
    return [path or ensure_tiny_model(spec, cache_dir) for spec, path in zip(specs, ready)]


# ---------------------------------------------------------------- the shipped pairs (tiny_pair/)
#
# Pairs 0-4 of the main job's world are committed, so that `--pair tiny` and experiments/reproduce.py start RL from
# the same weights on every CPU (docs/decisions.md#shipped-tiny-pairs-instead-of-a-warm-start-on-load).
#
#   tiny_pair/MANIFEST.json            what the folder holds and how it was made:
#       {"what": a sentence, "command": "python -m machinery.tiny_world build", "machine": CPU model name,
#        "cpu": its exact kind (memory.cpu_id), "stack": versions and CPU kernels (memory.software_stack),
#        "threads": torch threads per model, "models": {spec key: {"model": "a" or "b", "pair": k,
#                                                                  "files": {name: {"sha256": hex, "size": bytes}}}}}
#   tiny_pair/<spec key>/              save_pretrained's files and tiny_spec.json, as ensure_tiny_model writes them

SHIPPED = os.path.join(ROOT, "tiny_pair")
MANIFEST = "MANIFEST.json"
BUILD = "python -m machinery.tiny_world build"


def read_manifest(shipped=None):
    """The shipped pairs' manifest (a dict), or None when `shipped` (default SHIPPED) holds none."""
    path = os.path.join(shipped or SHIPPED, MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def shipped_model(spec, shipped=None):
    """The shipped folder of `spec` if the manifest in `shipped` (default SHIPPED) lists its key, else None.

    Every file is checked against the manifest before the folder is returned: a changed, missing or extra file
    raises wheels.ChecksumMismatch naming the file, the sha256 expected and found, and the fix."""
    shipped = shipped or SHIPPED
    manifest = read_manifest(shipped)
    entry = (manifest or {}).get("models", {}).get(spec.key())
    if entry is None:
        return None
    folder, where = os.path.join(shipped, spec.key()), os.path.join(shipped, MANIFEST)
    fix = (f"restore the shipped files (`git checkout -- {os.path.basename(shipped)}`), or ship this machine's own "
           f"pair with `{BUILD}` (another CPU warm-starts a slightly different pair)")
    present = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    extra = sorted(present - set(entry["files"]))
    if extra:
        raise ChecksumMismatch(f"{os.path.join(folder, extra[0])}: not a file of the shipped pair ({where} lists "
                               f"{', '.join(sorted(entry['files']))}); remove it, or {fix}")
    for name, want in sorted(entry["files"].items()):
        path = os.path.join(folder, name)
        got = sha256_of(path) if name in present else "nothing (the file is missing)"
        if got != want["sha256"]:
            raise ChecksumMismatch(f"{path}: sha256 {got}, expected {want['sha256']} ({where}): the shipped tiny "
                                   f"pair was changed; {fix}")
    return folder


def write_shipped(paths, specs, shipped=None, threads=1):
    """Write the model folders `paths` (of `specs`: A and B of pair 0, then of pair 1, ...) and their manifest as
    the shipped pairs in `shipped` (default SHIPPED); returns the manifest. The new folder is assembled next to the
    old one and renamed into place, so a killed write leaves the old pair (or, between the two renames, none:
    `git checkout` brings it back). threads: the torch threads each model was warm-started with (recorded)."""
    shipped = os.path.abspath(shipped or SHIPPED)
    parent = os.path.dirname(shipped)
    tmp = tempfile.mkdtemp(prefix=f".building-{os.getpid()}-", dir=parent)
    try:
        models = {}
        for i, (spec, path) in enumerate(zip(specs, paths)):
            dest = os.path.join(tmp, spec.key())
            shutil.copytree(path, dest)
            models[spec.key()] = {"model": "ab"[i % 2], "pair": i // 2,
                                  "files": {f: {"sha256": sha256_of(os.path.join(dest, f)),
                                                "size": os.path.getsize(os.path.join(dest, f))}
                                            for f in sorted(os.listdir(dest))}}
        manifest = {"what": "the warm-started tiny pairs of the main job's world (tiny_world.SHIPPED_SPECS): pair 0 "
                            "is the main job's (`python graft_min.py --pair tiny`), pair k the one `--seed k` and "
                            "experiments/reproduce.py's seed k train, loaded without a warm-start; every file is checked "
                            "against its sha256 on load (tiny_world.shipped_model)",
                    "command": BUILD, "machine": memory.machine(), "cpu": memory.cpu_id(),
                    "stack": memory.software_stack("cpu"), "threads": threads, "models": models}
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        share_modes(tmp)
        old = None
        if os.path.exists(shipped):
            old = tempfile.mkdtemp(prefix=f".replaced-{os.getpid()}-", dir=parent)
            os.replace(shipped, os.path.join(old, "tiny_pair"))
        os.replace(tmp, shipped)
        if old:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def compare_with_shipped(paths, specs, shipped=None):
    """Print, file by file, whether the built folders `paths` equal the shipped files that the manifest in `shipped`
    (default SHIPPED) lists, and what a difference means; returns the number that differ or are on one side only."""
    shipped = shipped or SHIPPED
    manifest = read_manifest(shipped)
    if manifest is None:
        print(f"no shipped pair to compare with ({os.path.join(shipped, MANIFEST)} is missing); run `{BUILD}`")
        return 1
    differ, total = 0, 0
    for spec, path in zip(specs, paths):
        entry = manifest["models"].get(spec.key())
        if entry is None:
            print(f"{spec.key()}: not in the shipped pairs ({', '.join(manifest['models'])}): the main job's spec or "
                  f"CACHE_VERSION changed since it was built; run `{BUILD}` to ship the new pair")
            differ, total = differ + 1, total + 1
            continue
        folder = os.path.join(shipped, spec.key())
        for name in sorted(set(os.listdir(path)) | set(entry["files"])):
            built, want = (sha256_of(os.path.join(p, name)) if os.path.exists(os.path.join(p, name)) else None
                           for p in (path, folder))
            total += 1
            if built == want:
                print(f"  equal    {spec.key()}/{name}  {built}")
            else:
                differ += 1
                print(f"  DIFFERS  {spec.key()}/{name}  built {built or '(none)'}, shipped {want or '(none)'}")
    here, stack = memory.machine(), memory.software_stack("cpu")
    same = (manifest["machine"], manifest.get("cpu"), manifest["stack"]) == (here, memory.cpu_id(), stack)
    if not differ:
        print(f"all {total} files equal, bit for bit: this machine ({here}) rebuilds the shipped pair")
    elif same:
        print(f"{differ} of {total} files differ on the machine and stack that built the shipped pair ({here}): the "
              f"warm-start code or the tiny world changed what the main job's specs make (bump CACHE_VERSION and run "
              f"`{BUILD}`), or the shipped files were edited")
    else:
        stack_diff = [f"{k} {manifest['stack'].get(k)} -> {stack.get(k)}"
                      for k in sorted(set(stack) | set(manifest["stack"])) if manifest["stack"].get(k) != stack.get(k)]
        print(f"{differ} of {total} files differ. The shipped pair was built on {manifest['machine']} "
              f"({manifest.get('cpu')}); this is {here} ({memory.cpu_id()}"
              f"{'; ' + ', '.join(stack_diff) if stack_diff else '; the same stack'}): another CPU or stack "
              f"warm-starts a slightly different pair (docs/runs.md, \"Across machines\"). `--pair tiny` keeps "
              f"loading the shipped one; `{BUILD}` would replace it with this machine's")
    return differ


def build_shipped(check=False, shipped=None, specs=SHIPPED_SPECS):
    """`python -m machinery.tiny_world build [--check]`: warm-start `specs` (default SHIPPED_SPECS) from scratch in a
    temporary cache, one torch thread a model (one process a core), then write them as the shipped pairs
    (write_shipped) or, with check, compare them with those file by file (compare_with_shipped). Returns the exit
    status (1: a file differs)."""
    cache = tempfile.mkdtemp(prefix="tiny-build-")
    threads, t0 = torch.get_num_threads(), time.time()
    print(f"warm-starting {', '.join(s.key() for s in specs)} from scratch in {cache} on {memory.machine()} "
          f"({memory.software_stack('cpu')['cpu_capability']} kernels, one thread a model, "
          f"{min(len(specs), os.cpu_count() or 1)} at a time)", flush=True)
    try:
        torch.set_num_threads(1)  # as each process of tiny_pair's parallel warm-start runs
        paths = tiny_pair(cache, specs, shipped=False)
        print(f"built in {time.time() - t0:.0f} s")
        if check:
            return int(compare_with_shipped(paths, specs, shipped) > 0)
        manifest = write_shipped(paths, specs, shipped)
        sizes = {key: sum(f["size"] for f in m["files"].values()) / 1e6 for key, m in manifest["models"].items()}
        print(f"wrote {shipped or SHIPPED}: " + ", ".join(f"{key} ({mb:.1f} MB)" for key, mb in sizes.items()))
        return 0
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(cache, ignore_errors=True)


# ---------------------------------------------------------------- the world report

def world_report(paths, n=8, temperature=1.0, delta=0.8, max_new_tokens=48, seed=0, world=None):
    """The world report of the models in `paths` on the held-out problems, n samples a prompt at `temperature`:
    {"models": {name: {family: {"pass@1", "all_fail", "habit" (the share of samples that are exactly the wrong-habit
    trace)}}}, "directions": {"src -> recv": {family: {"receiver_all_fail" (a count), and of those prompts
    "peer_mixed_share" (Eq. 4's candidates), "peer_any_success_share", and "admitted_share": of the mixed groups'
    responses, the share with s > delta (Eq. 8; nan without any)}}}}."""
    world = world or make_world()
    problems = [p for fam in sorted(world.heldout) for p in world.heldout[fam]]
    policies = [load_policy(p) for p in paths]
    names = [os.path.basename(p) for p in paths]
    k, rollouts, habits = [], [], []
    for i, (model, tok) in enumerate(policies):
        torch.manual_seed(seed * 1000 + i)
        ro = rollout.sample_groups(model, tok, [encode_prompt(tok, p) for p in problems], n, max_new_tokens, temperature)
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
                resp = rollout.retokenize([ro.texts[r] for r in rows], [ro.finished[r] for r in rows], tok)
                prompts = [encode_prompt(tok, problems[r // n]) for r in rows]
                with torch.no_grad():
                    lp, mask = rollout.token_logprobs(model, prompts, resp, tok.pad_token_id, temperature)
                src_mean = torch.stack([ro.logprobs[r].mean() for r in rows])
                admitted = float((loss.compatibility_weight(loss.mean_logprob(lp, mask), src_mean, delta) > 0).float().mean())
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
    print("\nreceiver's all-fail prompts, per direction and family: the share where the peer's group is mixed")
    print("(Eq. 4's candidates), where it has >= 1 success, and of those mixed groups' responses the share with s > delta")
    print(f"{'direction (source -> receiver)':56s} {'family':6s} {'all-fail':>8s} {'mixed':>6s} {'>=1':>6s} {'admitted':>9s}")
    for d, fams in report["directions"].items():
        for fam, v in fams.items():
            print(f"{d:56s} {fam:6s} {v['receiver_all_fail']:8d} {v['peer_mixed_share']:6.3f} "
                  f"{v['peer_any_success_share']:6.3f} {v['admitted_share']:9.3f}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="The tiny pair: make it ready (the shipped pair, or a warm-start, once, cached) and optionally "
                    "report on its world; or `build` the shipped pair (tiny_pair/) from scratch.")
    parser.add_argument("command", nargs="?", default="ready", choices=["ready", "build"],
                        help="ready (default): the pair of the world knobs and --seed below, from tiny_pair/ when "
                             "shipped, else warm-started once into the cache; build: warm-start the shipped pairs "
                             "(pairs 0-4 of the main job's world) from scratch in a temporary cache and write them "
                             "as tiny_pair/ with its MANIFEST.json")
    parser.add_argument("--check", action="store_true",
                        help="with build: compare the fresh build with tiny_pair/ file by file instead of writing it "
                             "(all equal on the machine and stack that built it; another CPU makes a slightly "
                             "different pair); exit status 1 if a file differs")
    parser.add_argument("--report", action="store_true", help="print the world report after warm-start")
    parser.add_argument("--cache-dir", default=None, help="cache folder (default ./cache or $GRAFT_MIN_CACHE)")
    parser.add_argument("--json", default=None, help="also write the report as JSON to this path")
    parser.add_argument("--seed", type=int, default=0,
                        help="the pair, as graft_min.py's --seed (pair_specs' pair_seed; 0: the shipped pair)")
    parser.add_argument("--world-split", action=argparse.BooleanOptionalAction, default=True,
                        help="world knob, as graft_min.py's (pair_specs)")
    parser.add_argument("--narrate", action="store_true", help="world knob, as graft_min.py's (column_trace)")
    parser.add_argument("--weak-habit", type=float, default=0.9, help="world knob, as graft_min.py's (pair_specs)")
    parser.add_argument("--strong-habit", type=float, default=0.25, help="world knob, as graft_min.py's (pair_specs)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    specs = pair_specs(args.weak_habit, args.strong_habit, args.world_split, args.narrate, pair_seed=args.seed)
    if args.command == "build":
        if specs != TINY or args.report or args.cache_dir or args.json:
            parser.error("build makes the shipped pairs only (tiny_world.SHIPPED_SPECS: pairs 0-4 of the main job's "
                         "world): give it no world knob, --seed, --report, --cache-dir or --json")
        raise SystemExit(build_shipped(check=args.check))
    if args.check:
        parser.error("--check goes with build: `python -m machinery.tiny_world build --check`")
    t0 = time.time()
    paths = tiny_pair(args.cache_dir, specs)
    print(f"tiny pair ready in {time.time() - t0:.1f} s: {paths[0]}, {paths[1]}")
    if args.report:
        report = world_report(paths, max_new_tokens=96 if args.narrate else 48,
                              world=make_world(0, args.world_split, args.narrate))
        print_report(report)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
