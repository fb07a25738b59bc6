"""Conformance with TRL's GRPOTrainer (trl 1.16.0, pinned in requirements-dev.txt), on the tiny pair.

What is compared, on the warm-started tiny Llama (model A, RoPE) and GPT-2 (model B, absolute positions):

- the loss: TRL's `loss_type="dapo"` (epsilon 0.2, epsilon_high 0.28, beta 0) through `GRPOTrainer._compute_loss`
  against `loss.policy_loss` on `rollout.token_logprobs` with every weight 1: value and gradient, on ratios inside
  and outside the clip range, on right-padded responses of different lengths;
- the group advantages of `GRPOTrainer._generate_and_score_completions` against `loss.group_advantages`;
- and each difference listed in docs/differences.md ("Next to TRL's GRPOTrainer"): bf16 autocast, position ids
  under left padding, padding of old log-probs, minibatch shuffling, the token-mean divisor, zero weight versus
  removal, and the configuration defaults.

The tests call TRL's private methods. If one is missing or its parameters changed, `trl_call` fails naming the
method and the version these tests were written for, instead of a bare AttributeError or TypeError.
The file runs in seconds: `tiny_pair_ready` is the tiny pair shipped in tiny_pair/ (no warm-start).
"""

import inspect

import datasets
import pytest
import torch
import trl
from trl import GRPOConfig, GRPOTrainer

import graft_min
import loss
import rollout
from machinery import pairs, settings, tiny_world

WRITTEN_FOR = "1.16.0"
# TRL internals we call -> the parameter names we pass (checked against inspect.signature before each call)
INTERNALS = {
    "_compute_loss": ["model", "inputs"],
    "_generate_and_score_completions": ["inputs"],
    "_get_per_token_logps_and_entropies": ["model", "input_ids", "attention_mask", "logits_to_keep"],
    "_prepare_inputs": ["generation_batch"],
    "_get_train_sampler": [],
}
# equal-length prompts (10 characters, one token each for the character tokenizers of both models)
QUESTIONS = [tiny_world.add_problem(a, b) for a, b in [(123, 456), (389, 275), (640, 199), (777, 888)]]


def trl_call(trainer, name, *args, **kwargs):
    """trainer.<name>(*args, **kwargs), failing with a clear message if TRL's internal is not the one of 1.16.0."""
    where = f"GRPOTrainer.{name} (tests written for trl {WRITTEN_FOR}, installed trl {trl.__version__})"
    fn = getattr(trainer, name, None)
    if not callable(fn):
        pytest.fail(f"{where} is missing: update tests/test_trl.py to the new TRL internals")
    params = list(inspect.signature(fn).parameters)
    missing = [p for p in INTERNALS[name] if p not in params]
    if missing:
        pytest.fail(f"{where}: parameters {missing} are gone (now {params}); update tests/test_trl.py")
    try:
        return fn(*args, **kwargs)
    except (AttributeError, TypeError, KeyError) as e:
        pytest.fail(f"{where} raised {type(e).__name__}: {e}; its internals changed, update tests/test_trl.py")


def trl_attr(trainer, name):
    """trainer.<name>, failing with a clear message if TRL 1.16.0's attribute is gone."""
    if not hasattr(trainer, name):
        pytest.fail(f"GRPOTrainer.{name} is missing (tests written for trl {WRITTEN_FOR}, installed trl "
                    f"{trl.__version__}): update tests/test_trl.py to the new TRL internals")
    return getattr(trainer, name)


def preset_reward(completions, reward, **kwargs):
    """A reward function that ignores the text: each input dict carries its reward in a "reward" column."""
    return list(reward)


def make_trainer(path, out, **overrides):
    """A GRPOTrainer on a CPU around a freshly loaded tiny model, in training mode (TRL's "train" branches).

    The tiny tokenizers have a pad token (id 0) and an EOS (id 1); they have no chat template, which TRL does not
    need for plain-string prompts."""
    model, tok = pairs.load_policy(path)
    args = dict(output_dir=str(out), use_cpu=True, bf16=False, loss_type="dapo", epsilon=0.2, epsilon_high=0.28,
                beta=0.0, report_to=[], num_generations=4, per_device_train_batch_size=8, max_completion_length=8,
                save_strategy="no")
    args.update(overrides)
    rows = [{"prompt": p.question, "reward": 0.0} for p in QUESTIONS]
    trainer = GRPOTrainer(model=model, reward_funcs=preset_reward, args=GRPOConfig(**args),
                          train_dataset=datasets.Dataset.from_list(rows), processing_class=tok)
    # what Trainer.train() (not run here) would do first: checkpointing on (TRL's default), training mode (TRL's
    # "train" branches; the tiny models have no dropout), and the accumulation steps of the loop (here 1)
    if trainer.args.activation_checkpointing:
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs=trainer.args.activation_checkpointing_kwargs or None)
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer, model, tok


def trl_batch(tok, prompts, responses):
    """TRL's layout: left-padded prompt ids / mask [B, P], right-padded completion ids / mask [B, T]."""
    P, pad = max(map(len, prompts)), tok.pad_token_id
    prompt_ids = torch.tensor([[pad] * (P - len(p)) + p for p in prompts])  # [B, P]
    prompt_mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])  # [B, P]
    completion_ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for r in responses], batch_first=True,
                                                     padding_value=pad)  # [B, T]
    completion_mask = (torch.arange(completion_ids.shape[1])[None] < torch.tensor([len(r) for r in responses])[:, None])
    return dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                completion_mask=completion_mask.long())


def trl_logprobs(trainer, model, batch):
    """TRL's per-token log-probs [B, T] (fused chunked lm-head, its autocast, no position ids)."""
    with torch.no_grad():
        lp, _, _ = trl_call(trainer, "_get_per_token_logps_and_entropies", model,
                            torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1),
                            torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1),
                            batch["completion_ids"].shape[1])
    return lp


def grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])  # [n_params]


def rel(a, b):
    """max |a - b| / max |b|: relative difference in the max norm."""
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max() / torch.as_tensor(b).abs().max())


# ---------------------------------------------------------------- 1. the loss

@pytest.mark.parametrize("which", [0, 1], ids=["llama", "gpt2"])
def test_dapo_loss_and_gradient_equal_policy_loss(which, tiny_pair_ready, tmp_path):
    trainer, model, tok = make_trainer(tiny_pair_ready[which], tmp_path)  # TRL default gradient checkpointing on
    assert model.is_activation_checkpointing
    probs = [p for p in QUESTIONS for _ in range(2)]  # 8 rows, equal prompts (left padding: see below)
    prompts = [tok.encode(p.question) for p in probs]
    responses = [tok.encode(p.solution)[:6 + 5 * i] + [tok.eos_token_id] * (i % 2) for i, p in enumerate(probs)]
    lp, mask = rollout.token_logprobs(model, prompts, responses, tok.pad_token_id)  # [B, T] each, ours
    B, T = lp.shape
    # old log-probs = current - offset, so rho = exp(offset): 1.49 (> 1.28), 0.67 (< 0.8), 0.90, 1.11, 1
    offsets = torch.tensor([0.4, -0.4, -0.1, 0.1, 0.0])[torch.arange(B * T) % 5].view(B, T)  # [B, T]
    garbage = torch.tensor([50.0, -50.0])[torch.arange(B * T) % 2].view(B, T)  # finite garbage on padding
    old = torch.where(mask, lp.detach() - offsets, garbage)  # [B, T]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.3, -0.7])  # [B]
    ratio = torch.exp(offsets)[mask]
    clipped = loss.clipped_token_mask(lp, old, adv, mask)  # [B, T]
    assert (clipped & (adv[:, None] > 0)).any() and (clipped & (adv[:, None] < 0)).any()  # both clip branches
    assert ((ratio > 0.8) & (ratio < 1.28)).any() and (~mask).any()  # ratios inside, and padded rows

    model.zero_grad()
    ours, _ = loss.policy_loss(lp, old, adv, torch.ones(B), mask, eps_low=0.2, eps_high=0.28)
    ours.backward()
    g_ours = grads(model).clone()  # [n_params]
    model.zero_grad()
    inputs = {**trl_batch(tok, prompts, responses), "advantages": adv, "old_per_token_logps": old,
              "num_items_in_batch": mask.sum()}
    theirs = trl_call(trainer, "_compute_loss", model, inputs)
    theirs.backward()
    g_trl = grads(model)
    # measured: value 0 (llama) / 1.3e-7 (gpt2), gradient 7.4e-7 / 9.8e-7 relative
    assert rel(theirs.detach(), ours.detach()) < 1e-6
    assert rel(g_trl, g_ours) < 1e-5
    assert g_ours.abs().max() > 1e-3  # a real gradient, not two zeros


def test_padding_that_overflows_exp_makes_trl_nan(tiny_pair_ready, tmp_path):
    trainer, model, tok = make_trainer(tiny_pair_ready[0], tmp_path)
    prompts = [tok.encode(p.question) for p in QUESTIONS[:2]]
    responses = [tok.encode(p.solution)[:n] for p, n in zip(QUESTIONS[:2], (4, 9))]
    with torch.no_grad():
        lp, mask = rollout.token_logprobs(model, prompts, responses, tok.pad_token_id)  # [2, 9]
        adv = torch.tensor([-1.0, 1.0])  # the padded row (row 0) has a negative advantage
        results = []
        for pad_value in (0.0, -1e4):  # TRL's own old log-probs hold 0 on padding
            old = torch.where(mask, lp, torch.full_like(lp, pad_value))  # [2, 9]
            inputs = {**trl_batch(tok, prompts, responses), "advantages": adv, "old_per_token_logps": old,
                      "num_items_in_batch": mask.sum()}
            results.append((loss.policy_loss(lp, old, adv, torch.ones(2), mask)[0],
                            trl_call(trainer, "_compute_loss", model, inputs)))
    (ours0, trl0), (ours_big, trl_big) = results
    assert rel(trl0, ours0) < 1e-6 and torch.equal(ours_big, ours0)  # graft-min: padding never matters
    # TRL: rho = exp(0 - (-1e4)) = inf on padding, min(inf * -1, 1.28 * -1) = -inf, times mask 0 = NaN (with a
    # positive advantage the clip would keep it finite)
    assert torch.isnan(trl_big)


# ---------------------------------------------------------------- 2. the advantages

def test_group_advantages_match_up_to_the_std_epsilon(tiny_pair_ready, tmp_path):
    trainer, model, tok = make_trainer(tiny_pair_ready[0], tmp_path, max_completion_length=48)
    # TRL's sampler repeats each prompt num_generations times in a row: the groups are consecutive rows
    indices = list(trl_call(trainer, "_get_train_sampler"))
    assert len(indices) % 4 == 0 and all(len(set(indices[i:i + 4])) == 1 for i in range(0, len(indices), 4))
    rewards = torch.tensor([[1.0, 0, 0, 0], [0.0, 0, 0, 0], [1.0, 1, 1, 1], [0.2, 0.9, 0.5, 0.9]])  # [G, n]
    inputs = [{"prompt": p.question, "reward": float(r)} for p, group in zip(QUESTIONS, rewards) for r in group]
    torch.manual_seed(0)
    out = trl_call(trainer, "_generate_and_score_completions", inputs)
    theirs = out["advantages"].view(4, 4)  # [G, n]
    ours = loss.group_advantages(rewards)  # [G, n], eps 1e-6
    std = rewards.std(dim=1, keepdim=True)  # [G, 1], both use the sample (Bessel) std
    assert rel(theirs, ours * (std + 1e-6) / (std + 1e-4)) < 1e-6  # measured 0
    assert (theirs - ours).abs().max() > 1e-4  # the epsilons differ: 1.4997 vs 1.499997 for one success in 4
    assert torch.equal(theirs[1:3], torch.zeros(2, 4)) and torch.equal(ours[1:3], torch.zeros(2, 4))  # all-fail/success
    assert "importance_sampling_ratio" not in out  # the vLLM correction is off without vLLM
    # completions are cut after the first EOS, as rollout.response_length cuts after the first stop id
    assert sorted(trl_attr(trainer, "eos_token_ids")) == rollout.stop_ids(model, tok)
    stop, done = rollout.stop_ids(model, tok), []
    for ids, m in zip(out["completion_ids"], out["completion_mask"].bool()):
        kept = ids[m].tolist()
        assert rollout.response_length(kept, stop) == (len(kept), kept[-1] in stop)  # no stop id before the end
        done.append(kept[-1] in stop)
    assert any(done)


# ---------------------------------------------------------------- 3. the differences

@pytest.mark.parametrize("which", [0, 1], ids=["llama", "gpt2"])
def test_no_position_ids_under_left_padding(which, tiny_pair_ready, tmp_path):
    trainer, model, tok = make_trainer(tiny_pair_ready[which], tmp_path)
    probs = QUESTIONS[:2] + [tiny_world.mul_problem(12, 3), tiny_world.mul_problem(45, 6)]  # prompts of 10 and 7
    prompts = [tok.encode(p.question) for p in probs]
    responses = [tok.encode(p.solution)[:20] for p in probs]
    batch = trl_batch(tok, prompts, responses)
    with torch.no_grad():
        ours, mask = rollout.token_logprobs(model, prompts, responses, tok.pad_token_id)  # [4, 20], explicit positions
        alone = torch.stack([rollout.token_logprobs(model, [p], [r], tok.pad_token_id)[0][0]
                             for p, r in zip(prompts, responses)])  # [4, 20], each sequence without padding
    theirs = trl_logprobs(trainer, model, batch)  # [4, 20]
    assert batch["prompt_mask"][2:].eq(0).any()  # rows 2-3 are left-padded
    assert (ours - alone)[mask].abs().max() < 1e-5  # measured 1.2e-6 (llama), 1.4e-6 (gpt2)
    assert (theirs - alone)[:2].abs().max() < 1e-5  # unpadded rows agree
    gap = (theirs - alone)[2:].abs().max()
    if which == 0:
        assert gap < 1e-5  # RoPE: shifting every position by the padding changes nothing (measured 6.5e-7)
    else:
        assert gap > 1.0  # absolute positions: the prompt starts at position 3, not 0 (measured 12.8)


def test_bf16_default_autocasts_the_logprobs(tiny_pair_ready, tmp_path):
    prompts_responses = [(p.question, p.solution[:20]) for p in QUESTIONS]
    gaps = {}
    for bf16 in (True, False):  # TRL's default is bf16=True, autocast also on a CPU
        trainer, model, tok = make_trainer(tiny_pair_ready[0], tmp_path, bf16=bf16)
        prompts, responses = ([tok.encode(x) for x in col] for col in zip(*prompts_responses))
        with torch.no_grad():
            ours, mask = rollout.token_logprobs(model, prompts, responses, tok.pad_token_id)  # [4, 20] fp32
        gaps[bf16] = float((trl_logprobs(trainer, model, trl_batch(tok, prompts, responses)) - ours)[mask].abs().max())
    assert gaps[True] > 1e-3 and gaps[False] < 1e-5  # measured 9e-3 and 1e-6


def test_trl_shuffles_rows_across_minibatches_graft_keeps_prompts_whole_peer_last(tiny_pair_ready, tmp_path):
    trainer, model, tok = make_trainer(tiny_pair_ready[0], tmp_path, steps_per_generation=2, max_completion_length=4)
    inputs = [{"prompt": p.question, "reward": float(i % 2)} for p in QUESTIONS for i in range(4)]  # 16 rows
    torch.manual_seed(0)
    trl_call(trainer, "_prepare_inputs", inputs)  # generates, shuffles, splits into 2 minibatches of 8
    buffered = trl_attr(trainer, "_buffered_inputs")  # the minibatches _prepare_inputs keeps for the next steps
    question_of = {tuple(tok.encode(p.question)): q for q, p in enumerate(QUESTIONS)}
    trl_mbs = [[question_of[tuple(ids.tolist())] for ids in mb["prompt_ids"]] for mb in buffered]
    total = sum(int(mb["completion_mask"].sum()) for mb in buffered)
    assert all(int(mb["num_items_in_batch"]) == total for mb in buffered)  # the generation batch's
    assert len(trl_mbs) == 2 and any(set(trl_mbs[0]) & set(trl_mbs[1]))  # some prompt's group is split
    assert {2, 3} & set(trl_mbs[0])  # rows of prompts 2-3 ("peer" prompts below) in the first minibatch
    # graft-min: prompts 2 and 3 hold peer responses -> their whole groups form the last minibatch
    rows = [graft_min.Row(q, [], [0], torch.zeros(1), 0.0, 1.0, q >= 2 and i == 0) for q in range(4) for i in range(4)]
    ours = graft_min.minibatches(rows, 2, "last", None)
    assert [[r.prompt for r in mb] for mb in ours] == [[0] * 4 + [1] * 4, [2] * 4 + [3] * 4]


def test_divisor_is_generation_batch_tokens_over_steps_not_the_minibatchs_own(tiny_pair_ready, tmp_path):
    # GRAFT's 2 minibatches (2 AdamW steps) per rollout batch = TRL's steps_per_generation 2, gradient accumulation 1
    trainer, model, tok = make_trainer(tiny_pair_ready[0], tmp_path, steps_per_generation=2,
                                       per_device_train_batch_size=4)
    lengths = [[4, 2, 2, 2], [12, 10, 10, 10]]  # minibatch j = prompt j's group: 10 and 42 tokens, 52 in all
    adv = loss.group_advantages(torch.tensor([[1.0, 0, 0, 0]]))[0]  # [4] 1.5, -0.5, -0.5, -0.5
    for j, p in enumerate(QUESTIONS[:2]):
        prompts, responses = [tok.encode(p.question)] * 4, [tok.encode(p.solution)[:n] for n in lengths[j]]
        lp, mask = rollout.token_logprobs(model, prompts, responses, tok.pad_token_id)  # [4, T]
        ours, _ = loss.policy_loss(lp, lp.detach(), adv, torch.ones(4), mask)  # rho = 1: -sum(A * len) / N_j
        inputs = {**trl_batch(tok, prompts, responses), "advantages": adv, "num_items_in_batch": torch.tensor(52)}
        theirs = trl_call(trainer, "_compute_loss", model, inputs)  # no old log-probs: rho = 1 too
        signal = -float((adv * torch.tensor(lengths[j], dtype=torch.float)).sum())  # -3.0 in both minibatches
        assert abs(ours.item() - signal / sum(lengths[j])) < 1e-6  # ours: the minibatch's own 10 or 42 tokens
        assert abs(theirs.item() - signal / (52 / 2)) < 1e-6  # TRL: 52 / steps_per_generation = 26 for both


def test_zero_weight_is_not_removal(tiny_pair_ready, tmp_path):
    trainer, model, tok = make_trainer(tiny_pair_ready[0], tmp_path)
    p = QUESTIONS[0]
    prompts, responses = [tok.encode(p.question)] * 3, [tok.encode(p.solution)[:n] for n in (4, 6, 10)]
    adv = torch.tensor([1.0, -1.0, 1.5])  # [3] rows 0-1 own, row 2 a peer response the gate drops (s <= delta)
    with torch.no_grad():
        lp, mask = rollout.token_logprobs(model, prompts, responses, tok.pad_token_id)  # [3, 10]
        old = lp - 0.1 * torch.arange(10.0)  # [3, 10] ratios from 1 to 2.5: some tokens clip
        batch = trl_batch(tok, prompts, responses)

        def trl_loss(a, **extra):  # TRL has no per-response weight: weight it through the advantage or the mask
            inputs = {**batch, "advantages": a, "old_per_token_logps": old, "num_items_in_batch": mask.sum(), **extra}
            return float(trl_call(trainer, "_compute_loss", model, inputs))

        removed = float(loss.policy_loss(lp[:2], old[:2], adv[:2], torch.ones(2), mask[:2])[0])  # GRAFT: 10 tokens
        zero_w = float(loss.policy_loss(lp, old, adv, torch.tensor([1.0, 1, 0]), mask)[0])  # divides by 20 tokens
        assert abs(zero_w - removed * 10 / 20) < 1e-6 and abs(removed) > 1e-3  # zero weight halves it here
        assert abs(trl_loss(adv * torch.tensor([1.0, 1, 0])) - zero_w) < 1e-6  # TRL's zero advantage = zero weight
        w = torch.tensor([1.0, 0.85, 0.9])  # a weight in (0, 1] folds into the advantage exactly
        assert abs(trl_loss(adv * w) - float(loss.policy_loss(lp, old, adv, w, mask)[0])) < 1e-6
        tool_mask = torch.tensor([[1], [1], [0]]).expand_as(batch["completion_mask"])  # [3, 10] masked out ...
        assert abs(trl_loss(adv, tool_mask=tool_mask) - zero_w) < 1e-6  # ... still in num_items_in_batch: 20
        assert abs(trl_loss(adv, tool_mask=tool_mask, num_items_in_batch=torch.tensor(10)) - removed) < 1e-6


def test_configuration_defaults_differ_from_the_paper_preset(tmp_path):
    trl_default = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    ours = settings.parse_args(["--pair", "paper1"])  # the paper's recipe (App. B)
    assert trl_default.loss_type == "dapo" and trl_default.beta == 0.0 and trl_default.num_iterations == 1
    assert (trl_default.epsilon, trl_default.epsilon_high) == (0.2, None)  # None: epsilon_high = epsilon = 0.2
    assert (ours.eps_low, ours.eps_high) == (0.2, 0.28)
    assert trl_default.bf16 and ours.dtype == "bfloat16" and settings.parse_args([]).dtype == "float32"
    assert trl_default.gradient_checkpointing and ours.grad_checkpointing
    assert trl_default.lr_scheduler_type == "linear" and trl_default.warmup_steps == 0 and ours.warmup_steps == 0
    assert trl_default.learning_rate == ours.lr == 1e-6
    assert trl_default.weight_decay == 0.0 and ours.weight_decay == 0.01
    assert (trl_default.adam_beta1, trl_default.adam_beta2, trl_default.max_grad_norm) == (0.9, 0.999, 1.0)
    assert ours.grad_clip == 1.0
    assert trl_default.shuffle_dataset and not trl_default.mask_truncated_completions
    assert trl_default.scale_rewards == "group" and not trl_default.use_vllm
    assert (trl_default.temperature, trl_default.top_p, trl_default.top_k) == (1.0, 1.0, 0)
