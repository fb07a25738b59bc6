"""Shared fixtures: tiny random models built from configs (no downloads, seconds to build)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from machinery import memory  # noqa: E402
from machinery import tiny_world  # noqa: E402


def make_model(arch, tokenizer, d=32, layers=2, seed=0):
    spec = tiny_world.TinySpec(f"test-{arch}", arch, d_model=d, n_layer=layers, n_head=4, seed=seed)
    model = tiny_world.build_tiny_model(spec, tokenizer)
    model.eval()
    return model


@pytest.fixture(scope="session")
def char_tok_a():
    return tiny_world.char_tokenizer(tiny_world.alphabet(), shuffle_seed=1)


@pytest.fixture(scope="session")
def char_tok_b():
    # same alphabet size as A (so random models score texts alike), different ids
    return tiny_world.char_tokenizer(tiny_world.alphabet(), shuffle_seed=2)


@pytest.fixture(scope="session")
def bpe_tok():
    world = tiny_world.make_world()
    corpus = [p.question + p.solution for fam in world.train.values() for p in fam[:300]]
    return tiny_world.bpe_tokenizer(corpus, vocab_size=320)


@pytest.fixture(scope="session")
def llama(char_tok_a):
    torch.manual_seed(0)
    return make_model("llama", char_tok_a, seed=0)


@pytest.fixture(scope="session")
def gpt2(char_tok_b):
    torch.manual_seed(0)
    return make_model("gpt2", char_tok_b, seed=1)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, llama, gpt2, char_tok_a, char_tok_b):
    """The two tiny random models saved as folders, for runs through --model-a / --model-b."""
    root = tmp_path_factory.mktemp("models")
    paths = []
    for name, model, tok in (("a", llama, char_tok_a), ("b", gpt2, char_tok_b)):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        paths.append(str(root / name))
    return paths


@pytest.fixture(scope="session")
def tiny_pair_ready():
    """The main job's warm-started tiny pair: the folders shipped in tiny_pair/, each file's sha256 checked against
    tiny_pair/MANIFEST.json (instant, no warm-start, nothing written to the cache)."""
    return tiny_world.tiny_pair()


def another_machine():
    """A CPU name and a kernel capability that are not this host's, whatever the host: tests that fake a record
    written "on another machine" take these, so that the difference exists on every CPU (AVX2, AVX-512, none)."""
    here = torch.backends.cpu.get_cpu_capability()
    return "Some Other CPU than " + memory.machine(), "AVX2" if here != "AVX2" else "AVX512"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (its docstring says how many); `-m 'not slow'` leaves it out")


def pytest_terminal_summary(terminalreporter):
    """Say once why tests were skipped (pytest -q alone only counts them): one line per reason."""
    skipped = terminalreporter.stats.get("skipped", [])
    for reason in sorted({r.longrepr[2] for r in skipped if isinstance(r.longrepr, tuple)}):
        terminalreporter.write_line(reason)
