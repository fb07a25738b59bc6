"""Tests for the real-model path (`--pair small` and the paper's pairs) without downloads.

Tiny stand-ins of the real architectures (a Qwen2 and a Llama config, 2 layers, hidden 32), each
with its own small byte-level BPE tokenizer and its own chat template, are saved with
`save_pretrained` and run through exactly the path of `--pair small` (`--model-a DIR --model-b
DIR`, bf16 autocast, gradient checkpointing, JSONL data written here). The loaders are tested on
small files; unavailable hub ids must give one clear message (offline mode, no network).

Rewards in the run come from a deterministic stand-in (a hash of the text), as in test_loop.py,
so that random models have mixed and all-fail groups and exchanges really happen."""

import json
import logging
import zlib

import pytest
import torch

import graft_min
import rollout
from machinery import memory, pairs, settings, tasks, tiny_world

QUESTIONS = ["What is $2+3$?", "Compute $7 \\cdot 8$.", "Simplify $\\frac{6}{8}$.", "What is $10-4$?",
             "Find $x$ if $2x=10$.", "What is $3^2$?", "How many sides has a hexagon?", "What is $100/4$?"]
TEMPLATES = {  # different templates, so that each model's prompt shows which one was applied
    "qwen2": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "llama": "{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n\n{% endfor %}"
             "{% if add_generation_prompt %}### assistant:\n{% endif %}",
}


def fake_reward(text, gold, require_box=True):
    return 1.0 if zlib.crc32(text.encode()) % 3 == 0 else 0.0


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def build_stand_in(arch, folder, vocab_size, seed):
    """A tiny random model of a real architecture with its own BPE tokenizer and chat template."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    corpus = [q + " " + tasks.SUFFIX for q in QUESTIONS] + [TEMPLATES[arch]] * 3
    tok = tiny_world.bpe_tokenizer(corpus, vocab_size=vocab_size)
    tok.chat_template = TEMPLATES[arch]
    ids = dict(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
               bos_token_id=tok.eos_token_id, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, max_position_embeddings=512, tie_word_embeddings=True)
    torch.manual_seed(seed)
    if arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=2, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(num_key_value_heads=4, **ids))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    return build_stand_in("qwen2", root / "qwen2", 400, 0), build_stand_in("llama", root / "llama", 340, 1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    answers = ["5", "56", "\\frac{3}{4}", "6", "5", "9", "6", "25"]
    math = [{"problem": q, "solution": f"Work: \\boxed{{0}} is wrong, so the answer is $\\boxed{{{a}}}$.",
             "level": "Level 1", "type": "Algebra"} for q, a in zip(QUESTIONS, answers)]
    return {
        "math": write_jsonl(root / "math_train.jsonl", math),
        "math500": write_jsonl(root / "math500.jsonl", [{"problem": q, "answer": a, "unique_id": i}
                                                          for i, (q, a) in enumerate(zip(QUESTIONS[:3], answers))]),
        "amc23": write_jsonl(root / "amc23.jsonl", [{"id": 0, "question": QUESTIONS[5], "answer": 9.0},
                                                     {"id": 1, "question": QUESTIONS[7], "answer": 25.0}]),
    }


# ---------------------------------------------------------------- the --pair small path, end to end

def test_two_graft_steps_and_evaluation_through_the_small_pair_path(stand_ins, data, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(graft_min, "reward", fake_reward)
    prompts = []  # (tokenizer folder, decoded prompt) of every prompt the run encodes
    real_encode = tasks.encode_prompt

    def spy(tok, problem):
        ids = real_encode(tok, problem)
        prompts.append((tok.name_or_path, problem, tok.decode(ids)))
        return ids
    monkeypatch.setattr(tasks, "encode_prompt", spy)
    out = tmp_path / "run"
    cfg = settings.parse_args([
        "--pair", "small", "--model-a", stand_ins[0], "--model-b", stand_ins[1], "--device", "cpu",
        "--train-data", data["math"], "--eval-sets", "math500,amc23",
        "--eval-data", f"math500={data['math500']}", "--eval-data", f"amc23={data['amc23']}",
        "--method", "graft", "--steps", "2", "--prompts-per-step", "6", "--n", "4", "--max-new-tokens", "8",
        "--eval-samples", "2", "--eval-problems", "3", "--seed", "1", "--out", str(out)])
    assert (cfg.dtype, cfg.grad_checkpointing, cfg.data) == ("bfloat16", True, "math")  # the small preset's
    with caplog.at_level(logging.INFO, logger="graft_min"):
        summary = graft_min.run(cfg, "graft", str(out))

    metrics = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert sorted((m["model"], m["step"]) for m in metrics) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert sum(m["selected"] for m in metrics) > 0, "no exchange in 2 steps: the test proves less; pick another seed"
    assert all(m["families"].keys() == {"math"} for m in metrics)
    evals = [json.loads(line) for line in open(out / "evals.jsonl")]
    assert sorted((e["model"], e["step"]) for e in evals) == [("a", 0), ("a", 2), ("b", 0), ("b", 2)]
    assert all({"math500", "amc23", "mean"} <= e.keys() for e in evals)
    assert json.load(open(out / "config.json"))["model_paths"] == {"a": stand_ins[0], "b": stand_ins[1]}
    assert set(summary["models"]) == {"a", "b"}
    # every prompt: the model's own chat template around the question, which ends with the paper's suffix
    for folder, arch in zip(stand_ins, ("qwen2", "llama")):
        seen = [(p, text) for f, p, text in prompts if f == folder]
        assert {p.family for p, _ in seen} == {"math", "math500", "amc23"}
        for p, text in seen:
            assert p.question.endswith(" " + tasks.SUFFIX)
            user = "<|im_start|>user\n" if arch == "qwen2" else "### user:\n"
            turn = "<|im_start|>assistant\n" if arch == "qwen2" else "### assistant:\n"
            assert text.startswith(user + p.question) and text.endswith(turn), text
    assert sum("fp32 weights" in r.getMessage() for r in caplog.records) == 2  # the memory estimate, per model


def test_make_policy_sets_up_bf16_autocast_and_checkpointing(stand_ins):
    cfg = settings.parse_args(["--pair", "small", "--device", "cpu", "--micro-batch", "2", "--max-new-tokens", "8"])
    pol = graft_min.make_policy("a", stand_ins[0], 1e-6, cfg)
    assert all(p.dtype == torch.float32 for p in pol.model.parameters())  # fp32 master weights
    ids = torch.tensor([pol.tok.encode("What is 2+3?")])
    with torch.no_grad():
        assert pol.model(input_ids=ids).logits.dtype == torch.bfloat16  # forward under autocast
    lp, _ = rollout.token_logprobs(pol.model, [ids[0].tolist()], [[5, 6]], pol.tok.pad_token_id)
    assert lp.dtype == torch.float32
    gb = memory.memory_estimate(pol.model, cfg)
    n = sum(p.numel() for p in pol.model.parameters())
    assert gb["total"] == pytest.approx(16 * n / 1e9)
    assert gb["logits"] == pytest.approx(3 * 2 * (512 + 8) * pol.model.config.vocab_size * 4 / 1e9)
    # a micro-batch larger than the minibatch (4 prompts x 4 / 2 = 8 sequences) holds the minibatch
    cfg = settings.parse_args(["--pair", "small", "--micro-batch", "64", "--max-new-tokens", "8",
                                "--prompts-per-step", "4", "--n", "4", "--minibatches", "2"])
    gb = memory.memory_estimate(pol.model, cfg)
    assert gb["logits"] == pytest.approx(3 * 8 * (512 + 8) * pol.model.config.vocab_size * 4 / 1e9)


def test_gradient_checkpointing_recomputes_layers_and_keeps_the_gradient(stand_ins):
    grads, calls = [], []
    for checkpointing in (False, True):
        model, tok = pairs.load_policy(stand_ins[1])
        if checkpointing:
            pairs.enable_grad_checkpointing(model)
        attn = model.model.layers[0].self_attn
        n_calls = []
        attn.register_forward_hook(lambda *a: n_calls.append(1))
        prompt, response = tok.encode("What is 2+3?"), tok.encode(" 5")
        lp, mask = rollout.token_logprobs(model, [prompt], [response], tok.pad_token_id)
        lp[mask].sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        calls.append(len(n_calls))
        assert not attn.training  # no dropout anywhere: only the checkpointed layers are in training mode
    assert calls == [1, 2]  # the backward pass ran the layer again
    torch.testing.assert_close(grads[0], grads[1])


def test_sampling_under_gradient_checkpointing_keeps_the_kv_cache(stand_ins):
    """With the checkpointed layers in training mode, transformers 5.17 (seen on a GPU machine) dropped the
    KV cache inside generate: each new token saw no context. sample_groups samples with every module in eval
    mode, so each decoder layer reads a cache that grows by one token a step, the same tokens come out as
    without checkpointing, and the training flags are restored afterwards."""
    texts = []
    for checkpointing in (False, True):
        model, tok = pairs.load_policy(stand_ins[0])
        if checkpointing:
            pairs.enable_grad_checkpointing(model)
        layer = model.model.layers[0]
        seen = []  # (layer in training mode, cached tokens) at each call inside generate
        def record(m, args, kw):
            cache = kw.get("cache", kw.get("past_key_values"))  # its name from transformers 5.2x / before
            seen.append((m.training, None if cache is None else cache.get_seq_length()))
        layer.register_forward_pre_hook(record, with_kwargs=True)
        torch.manual_seed(0)
        ro = rollout.sample_groups(model, tok, [tok.encode("What is 2+3?")], 2, 6, score=False)
        texts.append(ro.texts)
        assert not any(training for training, _ in seen)
        cached = [n for _, n in seen]
        assert cached[0] == 0 and cached[1:] == list(range(cached[1], cached[1] + len(cached) - 1))  # grows by one
        assert layer.training == checkpointing  # restored: the update still checkpoints this layer
    assert texts[0] == texts[1]


# ---------------------------------------------------------------- loaders

def test_math_train_gold_is_the_last_boxed_answer(tmp_path, caplog):
    path = write_jsonl(tmp_path / "math.jsonl", [
        {"problem": "Halve $1$.", "solution": "First $\\boxed{2}$ is wrong; $\\frac12=\\boxed{\\frac{1}{2}}$."},
        {"problem": "No box.", "solution": "The answer is 3."},
        {"problem": "  Add $1+1$. ", "solution": "$\\boxed 2$"}])
    with caplog.at_level(logging.WARNING, logger="graft_min"):
        probs = tasks.load_math_train(path)
    assert [p.answer for p in probs] == ["\\frac{1}{2}", "2"]
    assert [p.id for p in probs] == ["math/0", "math/2"] and {p.family for p in probs} == {"math"}
    assert probs[1].question == "Add $1+1$. Let's think step by step and output the final answer within \\boxed{}."
    assert probs[0].solution.startswith("First")
    assert any("skipped 1 record" in r.getMessage() and f"{path}:2" in r.getMessage() for r in caplog.records)


def test_gsm8k_gold_is_the_text_after_hashes(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", [
        {"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
         "answer": "In May: 48/2 = <<48/2=24>>24.\nIn all: 48+24 = <<48+24=72>>72.\n#### 72"},
        {"question": "A shirt costs $1,200. Two?", "answer": "2*1200=2400\n#### 2,400"}])
    probs = tasks.load_gsm8k(path, "test")
    assert [p.answer for p in probs] == ["72", "2,400"]
    assert {p.family for p in probs} == {"gsm8k"} and all(p.question.endswith(tasks.SUFFIX) for p in probs)
    assert [p.id for p in tasks.load_benchmark("gsm8k", path)] == ["gsm8k/0", "gsm8k/1"]


@pytest.mark.parametrize("name, question_field, answer, gold", [
    ("math500", "problem", "\\frac{3}{4}", "\\frac{3}{4}"), ("aime24", "problem", "204", "204"),
    ("aime25", "problem", "70", "70"), ("amc23", "question", 27.0, "27"), ("minerva", "question", "1.5e9", "1.5e9")])
def test_each_benchmark_loads_with_its_fields(tmp_path, name, question_field, answer, gold):
    path = write_jsonl(tmp_path / f"{name}.jsonl", [{question_field: "Q?", "answer": answer, "extra": 1}])
    [p] = tasks.load_benchmark(name, path)
    assert (p.id, p.family, p.answer, p.question) == (f"{name}/0", name, gold, "Q? " + tasks.SUFFIX)


def test_parquet_files_load_like_jsonl(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = str(tmp_path / "aime24.parquet")
    pq.write_table(pa.table({"id": [60, 61], "problem": ["P1", "P2"], "answer": ["204", "25"]}), path)
    assert [(p.id, p.answer) for p in tasks.load_benchmark("aime24", path)] == [("aime24/0", "204"), ("aime24/1", "25")]


def test_missing_field_names_file_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "math.jsonl", [{"problem": "P", "solution": "\\boxed{1}"}, {"problem": "Q"}])
    with pytest.raises(ValueError, match=f"{path}:2: missing field 'solution'.*this record has \\['problem'\\]"):
        tasks.load_math_train(path)
    path = write_jsonl(tmp_path / "amc.jsonl", [{"problem": "P", "answer": 3}])  # AMC23 calls it 'question'
    with pytest.raises(ValueError, match=f"{path}:1: missing field 'question'"):
        tasks.load_benchmark("amc23", path)


def test_bad_files_are_clear_errors(tmp_path):
    csv = tmp_path / "math500.csv"
    csv.write_text("problem,answer\nP,1\n")
    with pytest.raises(ValueError, match="math500.csv: unknown file type; give a .jsonl .* or .parquet"):
        tasks.load_benchmark("math500", str(csv))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "P", "answer": "1"}\n{"problem": \n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not JSON"):
        tasks.load_benchmark("math500", str(bad))
    folder = tmp_path / "MATH-500"
    folder.mkdir()
    (folder / "test.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="it is a folder: give one of its files \\(test.jsonl\\)"):
        tasks.load_benchmark("math500", str(folder))
    with pytest.raises(ValueError, match="unknown benchmark 'olympiad'"):
        tasks.load_benchmark("olympiad", None)


# ---------------------------------------------------------------- offline: one clear message

@pytest.fixture
def offline(monkeypatch):
    """Offline mode as HF_HUB_OFFLINE=1 sets it (the hub libraries read it once, at import)."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_an_unavailable_model_names_the_download_command(offline, tmp_path):
    with pytest.raises(pairs.ModelNotAvailable) as e:
        pairs.load_policy("graft-min-tests/no-such-model")
    msg = str(e.value)
    assert "not available offline" in msg and "hf download graft-min-tests/no-such-model" in msg
    assert "--model-a" in msg and e.value.__cause__ is None and e.value.__suppress_context__
    # the whole --pair small path stops with the same message, before any work
    cfg = settings.parse_args(["--pair", "small", "--device", "cpu", "--out", str(tmp_path / "run")])
    with pytest.raises(pairs.ModelNotAvailable, match="hf download Qwen/Qwen2.5-0.5B-Instruct"):
        graft_min.run(cfg, "graft", cfg.out)


def test_a_name_that_cannot_be_a_hub_id_fails_before_any_hub_call(monkeypatch):
    """A typo such as `--model-a a` (no folder, not owner/name) is refused at once: no connection and no
    transformers call, which would wait on the hub's retries for about a minute."""
    import socket

    import transformers

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("tried the network"))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: pytest.fail("asked transformers"))
    for name in ("a", "runs/no-such-run/grpo/", "./nothing", "a/b/c"):
        with pytest.raises(pairs.ModelNotAvailable, match="not a hub id of the form owner/name") as e:
            pairs.load_policy(name)
        assert f"model {name!r} is not a local folder" in str(e.value) and "\n" not in str(e.value)


def test_an_unreachable_hub_fails_at_once_with_the_same_message(monkeypatch):
    import socket

    import transformers

    tried = []

    def unreachable(address, timeout=None):
        tried.append((address, timeout))
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: pytest.fail("asked transformers"))
    with pytest.raises(pairs.ModelNotAvailable) as e:
        pairs.load_policy("graft-min-tests/no-such-model")
    msg = str(e.value)
    assert "the hub (huggingface.co) cannot be reached: Network is unreachable" in msg
    assert "hf download graft-min-tests/no-such-model" in msg
    assert tried == [(("huggingface.co", 443), 3.0)]


def test_a_model_in_the_local_hub_cache_loads_without_asking_the_network(monkeypatch, tmp_path, model_dirs):
    """hub_problem lets a cached hub id through (transformers then loads it from the cache)."""
    import socket

    import huggingface_hub

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("tried the network"))
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: str(tmp_path / name))
    assert pairs.hub_problem("someone/cached-model") is None


def test_an_unavailable_data_set_names_the_download_command(offline, monkeypatch):
    datasets = pytest.importorskip("datasets")
    if hasattr(datasets.config, "HF_HUB_OFFLINE"):
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(tasks.DataNotAvailable) as e:
        tasks.load_benchmark("math500")
    msg = str(e.value)
    assert "HuggingFaceH4/MATH-500" in msg and "not available offline" in msg
    assert "hf download HuggingFaceH4/MATH-500 --repo-type dataset" in msg and "--eval-data NAME=PATH" in msg
