"""Tests for rollout.py: padding-invariant scoring, generation = scoring, untruncated sampling,
re-tokenisation across tokenizers, EOS handling when pad == eos."""

import pytest
import torch
from transformers import GenerationConfig

import rollout
from machinery import tiny_world
from conftest import make_model


def _texts():
    w = tiny_world.make_world()
    return [w.train["mul"][0], w.train["add"][1], w.train["add"][2], w.train["mul"][3]]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_left_padded_batch_scores_like_each_sequence_alone(arch, char_tok_a):
    torch.manual_seed(0)
    model = make_model(arch, char_tok_a, seed=3)
    probs = _texts()
    prompts = [char_tok_a.encode(p.question) for p in probs]
    # responses of very different lengths, so both left and right padding are exercised
    responses = [char_tok_a.encode(p.solution[: 5 + 9 * i]) for i, p in enumerate(probs)]
    with torch.no_grad():
        batch_lp, mask = rollout.token_logprobs(model, prompts, responses, char_tok_a.pad_token_id, temperature=0.7)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            alone, _ = rollout.token_logprobs(model, [p], [r], char_tok_a.pad_token_id, temperature=0.7)
            assert mask[i].sum() == len(r)
            torch.testing.assert_close(batch_lp[i, :len(r)], alone[0], atol=1e-5, rtol=0)


def test_scoring_matches_a_plain_forward_pass(llama, char_tok_a):
    p = _texts()[1]
    ids = char_tok_a.encode(p.question + p.solution)
    P = len(char_tok_a.encode(p.question))
    with torch.no_grad():
        logits = llama(torch.tensor([ids])).logits[0]  # no padding at all
        ref = torch.log_softmax(logits[P - 1:-1] / 1.3, -1).gather(-1, torch.tensor(ids[P:])[:, None]).squeeze(-1)
        lp, _ = rollout.token_logprobs(llama, [ids[:P]], [ids[P:]], char_tok_a.pad_token_id, temperature=1.3)
    torch.testing.assert_close(lp[0], ref, atol=1e-5, rtol=0)



def _score_and_grad(model, prompts, responses, pad_id, temperature):
    """Log-probs [B, R] with gradients, and each parameter's gradient of a weighted sum of them."""
    model.zero_grad(set_to_none=True)
    lp, mask = rollout.token_logprobs(model, prompts, responses, pad_id, temperature)
    coef = torch.linspace(-1.0, 2.0, lp.shape[0])[:, None]  # [B, 1] advantages of both signs
    (torch.where(mask, lp, torch.zeros_like(lp)) * coef).sum().backward()
    return lp.detach(), mask, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_equal_the_whole_ones_in_value_and_gradient(arch, temperature, char_tok_a, monkeypatch):
    # past CHUNK_ELEMENTS the lm-head and log-softmax run over chunks of positions (recomputed in the backward);
    # here chunks of 3 positions (4 x R x 28 elements would be the whole), also cutting the last chunk short
    model = make_model(arch, char_tok_a, seed=7)
    probs = _texts()
    prompts = [char_tok_a.encode(p.question) for p in probs]
    responses = [char_tok_a.encode(p.solution[: 4 + 10 * i]) for i, p in enumerate(probs)]
    pad, V = char_tok_a.pad_token_id, model.get_output_embeddings().weight.shape[0]
    whole_lp, mask, whole_grad = _score_and_grad(model, prompts, responses, pad, temperature)
    with torch.no_grad():
        _, _, whole_ent = rollout.token_logprobs(model, prompts, responses, pad, temperature, entropy=True)
    calls = []
    real = rollout.chunked_logprobs
    monkeypatch.setattr(rollout, "chunked_logprobs", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(rollout, "CHUNK_ELEMENTS", len(prompts) * 3 * V)
    lp, mask2, grad = _score_and_grad(model, prompts, responses, pad, temperature)
    with torch.no_grad():
        scored, _, ent = rollout.token_logprobs(model, prompts, responses, pad, temperature, entropy=True)
    assert len(calls) == 2 and torch.equal(mask, mask2)
    torch.testing.assert_close(lp[mask], whole_lp[mask], atol=1e-6, rtol=0)
    torch.testing.assert_close(scored[mask], whole_lp[mask], atol=1e-6, rtol=0)
    torch.testing.assert_close(ent[mask], whole_ent[mask], atol=1e-6, rtol=0)
    assert grad.keys() == whole_grad.keys() and len(grad) == len(list(model.parameters()))
    for name in grad:
        torch.testing.assert_close(grad[name], whole_grad[name], atol=1e-6, rtol=1e-5, msg=name)


def test_chunked_logprobs_run_under_the_models_autocast(char_tok_a, monkeypatch):
    # a bf16-autocast model (pairs.autocast_bf16) takes its chunks' lm-head in bf16 too, as its own forward does
    from machinery import pairs
    model = pairs.autocast_bf16(make_model("llama", char_tok_a, seed=8), "cpu")
    probs = _texts()
    prompts = [char_tok_a.encode(p.question) for p in probs]
    responses = [char_tok_a.encode(p.solution[: 6 + 8 * i]) for i, p in enumerate(probs)]
    with torch.no_grad():
        whole, mask = rollout.token_logprobs(model, prompts, responses, char_tok_a.pad_token_id)
        monkeypatch.setattr(rollout, "CHUNK_ELEMENTS", 4 * 2 * 28)
        chunked, _ = rollout.token_logprobs(model, prompts, responses, char_tok_a.pad_token_id)
        monkeypatch.setattr(model, "autocast_dtype", None)  # the same chunks in fp32: visibly different numbers
        fp32, _ = rollout.token_logprobs(model, prompts, responses, char_tok_a.pad_token_id)
    torch.testing.assert_close(chunked[mask], whole[mask], atol=0.02, rtol=0)  # bf16 rounding of one matmul apart
    assert (fp32[mask] - whole[mask]).abs().max() > (chunked[mask] - whole[mask]).abs().max()


def test_the_tiny_pairs_largest_micro_batch_never_chunks(tiny_pair_ready):
    # the tiny pair's numbers stay bit for bit only if no micro-batch of its runs reaches the chunked path:
    # 64 sequences (its --micro-batch) x 1,000 positions (20x its longest response, 48 tokens) x its vocabularies
    import json
    import os
    from machinery import settings
    cfg = settings.parse_args(["--pair", "tiny"])
    for folder in tiny_pair_ready:
        with open(os.path.join(folder, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        assert cfg.max_new_tokens * 20 <= 1000 and cfg.micro_batch * 1000 * vocab < rollout.CHUNK_ELEMENTS


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scoring_without_gradients_keeps_only_response_logits_and_the_same_bits(arch, temperature, char_tok_a):
    # no grad: the lm-head sees only the last R + 1 positions (logits_to_keep); with grad it sees all of them.
    # The log-probs must be bit for bit the same: the old log-probs of a run may not move with this saving.
    model = make_model(arch, char_tok_a, seed=5)
    probs = _texts()
    prompts = [char_tok_a.encode(p.question) for p in probs]
    responses = [char_tok_a.encode(p.solution[: 3 + 11 * i]) for i, p in enumerate(probs)]
    kept = []
    real_forward = model.forward

    def spy(*args, **kwargs):
        kept.append(kwargs.get("logits_to_keep"))
        return real_forward(*args, **kwargs)

    model.forward = spy
    with torch.no_grad():
        scored, mask = rollout.token_logprobs(model, prompts, responses, char_tok_a.pad_token_id, temperature)
    trained, _ = rollout.token_logprobs(model, prompts, responses, char_tok_a.pad_token_id, temperature)
    assert kept == [max(map(len, responses)) + 1, None]
    assert trained.requires_grad and not scored.requires_grad
    assert torch.equal(scored[mask], trained.detach()[mask])

@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_generation_logprobs_equal_a_separate_scoring_pass(arch, char_tok_a):
    torch.manual_seed(0)
    model = make_model(arch, char_tok_a, seed=4)
    prompts = [char_tok_a.encode(p.question) for p in _texts()]
    T, n = 0.9, 3
    torch.manual_seed(123)
    ro = rollout.sample_groups(model, char_tok_a, prompts, n, max_new_tokens=12, temperature=T)
    # the same draw again, straight from generate, keeping its logits
    torch.manual_seed(123)
    flat = [p for p in prompts for _ in range(n)]
    P = max(map(len, flat))
    ids = torch.tensor([[char_tok_a.pad_token_id] * (P - len(p)) + p for p in flat])
    att = (torch.arange(P)[None] >= torch.tensor([P - len(p) for p in flat])[:, None]).long()
    out = model.generate(input_ids=ids, attention_mask=att, do_sample=True, temperature=T, top_k=0, top_p=1.0,
                         max_new_tokens=12, eos_token_id=char_tok_a.eos_token_id, pad_token_id=char_tok_a.pad_token_id,
                         output_logits=True, return_dict_in_generate=True, generation_config=GenerationConfig())
    for i in range(len(flat)):
        resp = ro.response_ids[i]
        assert out.sequences[i, P:P + len(resp)].tolist() == resp
        gen_lp = torch.stack([torch.log_softmax(out.logits[t][i] / T, -1)[tok] for t, tok in enumerate(resp)])
        torch.testing.assert_close(ro.logprobs[i], gen_lp, atol=1e-4, rtol=0)


def test_sampling_ignores_the_models_generation_config(char_tok_a):
    """A hub generation_config with top_k / top_p / repetition penalty must not leak in."""
    torch.manual_seed(0)
    model = make_model("llama", char_tok_a, seed=5)
    model.generation_config = GenerationConfig(top_k=1, top_p=0.05, repetition_penalty=5.0, do_sample=False)
    prompt = char_tok_a.encode("Q:12*3=")
    N = 3000
    torch.manual_seed(0)
    ro = rollout.sample_groups(model, char_tok_a, [prompt], N, max_new_tokens=1, temperature=1.0)
    counts = torch.bincount(torch.tensor([r[0] for r in ro.response_ids]), minlength=len(char_tok_a)).float()
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([prompt])).logits[0, -1], -1)
    tv = 0.5 * (counts / N - probs).abs().sum().item()
    assert (counts > 0).sum() > 10, "sampling was truncated (top-k/top-p leaked in)"
    assert tv < 0.06, f"empirical first-token distribution is {tv:.3f} (total variation) from softmax(logits)"
    assert model.generation_config.top_k == 1  # the model's own config is restored afterwards


def test_pad_equal_to_eos_keeps_eos_in_the_mask():
    tok = tiny_world.char_tokenizer(tiny_world.alphabet(), shuffle_seed=3, specials=["<eos>", "<eos2>", "<unk>"])
    tok.pad_token = tok.eos_token  # pad == eos, as many real tokenizers have it
    assert tok.pad_token_id == tok.eos_token_id
    eos = tok.eos_token_id
    assert rollout.response_length([5, 6, eos, eos, eos], eos) == (3, True)
    assert rollout.response_length([5, 6, 7], eos) == (3, False)
    torch.manual_seed(0)
    model = make_model("gpt2", tok, seed=6)
    torch.manual_seed(1)
    ro = rollout.sample_groups(model, tok, [tok.encode("Q:1+2=")], 16, max_new_tokens=6)
    for ids, done, lp in zip(ro.response_ids, ro.finished, ro.logprobs):
        assert len(lp) == len(ids)  # one log-prob per response token, the EOS included
        assert done == (ids[-1] == eos) and eos not in ids[:-1]
    _, mask = rollout.token_logprobs(model, [tok.encode("Q:")] * 2, [[5, eos], [5, 6, 7, eos]], tok.pad_token_id)
    assert mask.tolist() == [[True, True, False, False], [True, True, True, True]]


@pytest.mark.parametrize("src, recv", [("char_tok_a", "bpe_tok"), ("bpe_tok", "char_tok_a"), ("char_tok_a", "char_tok_b")])
def test_retokenised_peer_text_decodes_to_the_same_text(src, recv, request):
    src_tok, recv_tok = request.getfixturevalue(src), request.getfixturevalue(recv)
    texts = [p.solution for p in _texts()] + ["1+2=3 \\boxed{3", ""]
    src_ids = [src_tok.encode(t) for t in texts]
    assert [src_tok.decode(i) for i in src_ids] == texts
    finished = [True, False, True, False, True, False]
    ids = rollout.retokenize(texts, finished, recv_tok)
    for t, done, r in zip(texts, finished, ids):
        assert (len(r) > 0 and r[-1] == recv_tok.eos_token_id) == done
        body = r[:-1] if done else r
        assert recv_tok.decode(body) == t
    if recv == "bpe_tok":  # genuinely different segmentations: BPE merges characters
        assert len(ids[0]) - 1 < len(src_ids[0])  # (ids[0] ends with EOS)


def test_char_tokenizer_round_trip_and_visible_unknowns(char_tok_a, char_tok_b):
    text = "".join(tiny_world.alphabet())
    for tok in (char_tok_a, char_tok_b):
        assert tok.decode(tok.encode(text)) == text
        assert len(tok.encode(text)) == len(text)
    assert char_tok_a.encode(text) != char_tok_b.encode(text)  # different ids
    unk = char_tok_a.encode("1?2")
    assert len(unk) == 3 and unk[1] == char_tok_a.unk_token_id  # never silently dropped


def test_entropy_is_that_of_the_whole_next_token_distribution(llama, char_tok_a):
    p = _texts()[2]
    prompt, resp = char_tok_a.encode(p.question), char_tok_a.encode(p.solution)
    with torch.no_grad():
        lp, mask, ent = rollout.token_logprobs(llama, [prompt, prompt[:3]], [resp, resp[:4]], char_tok_a.pad_token_id,
                                               temperature=0.8, entropy=True)
        logits = llama(torch.tensor([prompt + resp])).logits[0, len(prompt) - 1:-1] / 0.8  # [R, V]
    probs = torch.softmax(logits, -1)
    ref = -(probs * probs.log()).sum(-1)  # [R]
    torch.testing.assert_close(ent[0, :len(resp)], ref, atol=1e-5, rtol=0)
    assert ent.shape == lp.shape == mask.shape
    vocab = len(char_tok_a)
    assert (ent[mask] >= 0).all() and (ent[mask] <= torch.log(torch.tensor(float(vocab))) + 1e-5).all()


def test_sample_groups_keeps_the_entropy_of_each_sampled_token(llama, char_tok_a):
    prompts = [char_tok_a.encode(p.question) for p in _texts()[:2]]
    torch.manual_seed(0)
    ro = rollout.sample_groups(llama, char_tok_a, prompts, 2, max_new_tokens=8, temperature=1.0)
    assert [len(e) for e in ro.entropy] == [len(r) for r in ro.response_ids]
    with torch.no_grad():
        _, _, ent = rollout.token_logprobs(llama, [ro.prompt_ids[0]], [ro.response_ids[0]], char_tok_a.pad_token_id,
                                           entropy=True)
    torch.testing.assert_close(ro.entropy[0], ent[0], atol=1e-5, rtol=0)


def test_sampling_stops_on_every_end_id_of_the_models_generation_config():
    """A stand-in whose generation_config lists two end ids (as Qwen2.5-Instruct's lists <|im_end|>
    and <|endoftext|>): either one ends a response, counts as finished and stays in the loss mask."""
    tok = tiny_world.char_tokenizer(tiny_world.alphabet(), shuffle_seed=4)
    tok.add_tokens(["<end2>"], special_tokens=True)
    eos, end2 = tok.eos_token_id, tok.convert_tokens_to_ids("<end2>")
    torch.manual_seed(0)
    model = make_model("gpt2", tok, seed=7)  # a random model: every token, both end ids included, is likely
    model.generation_config.eos_token_id = [end2, eos]
    assert rollout.stop_ids(model, tok) == sorted([eos, end2])
    assert rollout.response_length([5, end2, 6, eos], [eos, end2]) == (2, True)
    torch.manual_seed(2)
    ro = rollout.sample_groups(model, tok, [tok.encode("Q:1+2=")], 48, max_new_tokens=24)
    ends = [ids[-1] for ids, done in zip(ro.response_ids, ro.finished) if done]
    assert ends.count(eos) > 0 and ends.count(end2) > 0, f"this seed did not stop on both ids ({ends}); pick another"
    for ids, done, lp, text in zip(ro.response_ids, ro.finished, ro.logprobs, ro.texts):
        assert not {eos, end2} & set(ids[:-1])  # cut at the first end id
        assert done == (ids[-1] in (eos, end2)) and (done or len(ids) == 24)
        assert len(lp) == len(ids) and torch.isfinite(lp).all()  # the end id is scored: it is in the loss mask
        assert text == tok.decode(ids[:-1] if done else ids, skip_special_tokens=True) and "<" not in text
    assert model.generation_config.eos_token_id == [end2, eos]  # the model's own config is restored


def test_long_waits_show_progress_by_token_and_by_micro_batch(llama, char_tok_a, monkeypatch):
    """sample_groups' bars (rollout.progress, shown after 5 s for a tiny model; here at once, into a buffer):
    sampling moves one step per sampled token, filled to chunks x max_new_tokens when every response stopped
    early; scoring counts its micro-batches. Bars change nothing: the same samples as without them."""
    import io

    bars = []

    def visible(items=None, desc=None, delay=5, **kw):
        bar = rollout.tqdm(items, desc=desc, file=io.StringIO(), disable=desc is None, **kw)
        bars.append(bar)
        return bar
    prompts = [char_tok_a.encode(p.question) for p in _texts()[:2]]
    torch.manual_seed(0)
    plain = rollout.sample_groups(llama, char_tok_a, prompts, 3, max_new_tokens=10, gen_batch=4, score_batch=2)
    monkeypatch.setattr(rollout, "progress", visible)
    steps = []
    put = rollout.TokenBar.put
    monkeypatch.setattr(rollout.TokenBar, "put", lambda self, v: steps.append(1) or put(self, v))
    torch.manual_seed(0)
    ro = rollout.sample_groups(llama, char_tok_a, prompts, 3, max_new_tokens=10, gen_batch=4, score_batch=2,
                               desc="model a")
    assert ro.texts == plain.texts and all(torch.equal(x, y) for x, y in zip(ro.logprobs, plain.logprobs))
    sampling = next(b for b in bars if b.desc == "model a: sampling")
    assert sampling.total == 2 * 10 and sampling.n == 2 * 10  # 6 sequences in chunks of 4 -> 2 generate calls
    # generate passes each chunk's prompt, then each sampled step: as many steps as the chunk's longest response
    assert len(steps) == 2 + max(len(r) for r in ro.response_ids[:4]) + max(len(r) for r in ro.response_ids[4:])
    scoring = [b for b in bars if b.desc == "model a: scoring" and b.unit == "micro-batch"]
    assert [b.n for b in scoring] == [2]  # the chunk of 4 in 2 micro-batches of 2; the chunk of 2 in one pass


def test_bars_of_a_real_model_show_at_once(llama):
    big = torch.nn.Linear(10_000, 10_000)  # 100M parameters: a real model's size
    assert rollout.bar_delay(big) == 0 and rollout.bar_delay(llama) == 5
