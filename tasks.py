"""
Problems and prompts (paper Sec. 5.1).

    Problem            one verifiable problem: id, family, question, gold answer, and a worked
                       solution when the task has one (the tiny world's warm-start data)
    tiny_world         the synthetic two-family arithmetic world the tiny pair trains in
    prompt_batch       the shared prompt batch of step t: depends only on (seed, t), so a GRPO
                       run's trajectory log lines up with a later stored-peer run

The tiny world: short worked solutions whose *strategy* carries to unseen prompts.
  mul   2-digit x 1-digit by decomposition   Q:47*6=  ->  40*6+7*6=240+42=282 \\boxed{282}
  add   3-digit + 3-digit column by column   Q:658+375= -> 8+5=13,5+7+1=13,6+3+1=10 \\boxed{1033}
Each family's problems are split once (seeded) into train and held-out; held-out problems are
never used for warm-start or RL.
"""

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    id: str  # stable across runs, e.g. "mul/47*6"
    family: str  # skill family or benchmark name, for per-family accuracy
    question: str  # the problem text (the prompt before any template)
    answer: str  # gold final answer, bare (e.g. "282")
    solution: str = ""  # a worked solution ending in \boxed{answer}, when the task has one


# ---------------------------------------------------------------- the tiny world

def mul_problem(a, b):
    """a (2-digit) x b (1-digit) by decomposition into tens and units."""
    tens, units = a // 10 * 10, a % 10
    solution = f"{tens}*{b}+{units}*{b}={tens * b}+{units * b}={a * b} \\boxed{{{a * b}}}"
    return Problem(f"mul/{a}*{b}", "mul", f"Q:{a}*{b}=", str(a * b), solution)


def add_problem(a, b):
    """a + b (3-digit each) column by column from the units, writing each carry."""
    steps, carry = [], 0
    for da, db in zip(str(a)[::-1], str(b)[::-1]):
        s = int(da) + int(db) + carry
        steps.append(f"{da}+{db}+1={s}" if carry else f"{da}+{db}={s}")
        carry = s // 10
    solution = ",".join(steps) + f" \\boxed{{{a + b}}}"
    return Problem(f"add/{a}+{b}", "add", f"Q:{a}+{b}=", str(a + b), solution)


FAMILIES = {
    "mul": (mul_problem, [(a, b) for a in range(12, 100) for b in range(2, 10)]),
    "add": (add_problem, [(a, b) for a in range(1000, 10000, 7) for b in range(1000, 10000, 11)]),
}


@dataclass
class World:
    train: dict  # family -> list[Problem]
    heldout: dict  # family -> list[Problem]

    def train_problems(self):
        return [p for fam in sorted(self.train) for p in self.train[fam]]


def tiny_world(seed=0, heldout_per_family=200, max_train_per_family=2000):
    """The two-family world, split into train / held-out with a fixed seed."""
    rng = random.Random(f"tiny-world-{seed}")
    train, heldout = {}, {}
    for fam, (make, args) in FAMILIES.items():
        args = list(args)
        rng.shuffle(args)
        problems = [make(*a) for a in args[:heldout_per_family + max_train_per_family]]
        heldout[fam], train[fam] = problems[:heldout_per_family], problems[heldout_per_family:]
    return World(train, heldout)


def alphabet():
    """Every character the tiny world can contain (tokenizers must cover it exactly)."""
    return sorted(set("0123456789+*=,: Q\\boxed{}"))


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
