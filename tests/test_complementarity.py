"""experiments/complementarity.py: Fig. 1's shares and the k matrix on hand-made success counts, Eq. 7's s against an
independent forward pass, the admitted share vs delta on known s, problem choice and MATH levels, resume
(a killed run continues to the same numbers; other settings are refused), and the CLI end to end on the
tiny random models of conftest.py."""

import json
import math
import os

import pytest
import torch

import rollout
from machinery import runlog, tasks
from experiments import complementarity as comp

N = 2
# hand-made successes out of n = 2 for the 6 problems of gsm8k_file, by row: (k_A, k_B)
K = {0: (0, 0), 1: (0, 1), 2: (0, 2), 3: (1, 0), 4: (2, 0), 5: (1, 2)}


@pytest.fixture
def gsm8k_file(tmp_path):
    """Six GSM8K-style records whose gold of row i is i + 10 (questions in the tiny alphabet)."""
    path = tmp_path / "gsm8k_test.jsonl"
    path.write_text("".join(json.dumps({"question": f"Q:{i}+10=", "answer": f"{i}+10 #### {i + 10}"}) + "\n"
                            for i in range(6)))
    return str(path)


def stand_in(calls, fail_after=None):
    """A sampler with known outcomes: for problem row i, model A's first K[i][0] responses (B's: K[i][1]) box
    the gold, the others gold + 1; mean log-prob -0.5 per response. Records each call's model in `calls`."""
    def sample(model, tok, prompt_ids, n, max_new_tokens, temperature, gen_batch=None, score_batch=None, desc=None):
        if fail_after is not None and len(calls) >= fail_after:
            raise KeyboardInterrupt("killed")
        seat = 0 if model.config.model_type == "llama" else 1  # conftest: A is a Llama, B a GPT-2
        calls.append((seat, len(prompt_ids)))
        texts = []
        for ids in prompt_ids:
            i = int(tok.decode(ids).split(":")[1].split("+")[0])  # "Q:<i>+10= ..."
            texts += [f"{i}+10=\\boxed{{{i + 10 + (j >= K[i][seat])}}}" for j in range(n)]
        resp = [tok.encode(t) for t in texts]
        return rollout.Rollout(list(prompt_ids), resp, texts, [False] * len(texts),
                               [torch.full((len(r),), -0.5) for r in resp], n)
    return sample


def args(model_dirs, data_file, out, *extra):
    return comp.parse_args(["--model-a", model_dirs[0], "--model-b", model_dirs[1], "--data-file", data_file,
                            "--k", "6", "--n", str(N), "--chunk", "2", "--max-new-tokens", "8", "--out", out, *extra])


# ---------------------------------------------------------------- Fig. 1 and the gate, pure functions

def test_fig1_shares_and_matrix_by_hand():
    k = {"a": [0, 0, 0, 2, 4, 1], "b": [0, 3, 4, 0, 0, 2]}
    out = comp.fig1(k, 4)
    assert out["models"]["a"] == pytest.approx({"pass@1": 7 / 24, "all_fail": 3 / 6, "mixed": 2 / 6, "all_success": 1 / 6})
    assert out["models"]["b"] == pytest.approx({"pass@1": 9 / 24, "all_fail": 3 / 6, "mixed": 2 / 6, "all_success": 1 / 6})
    # B fails all on problems 0, 3, 4, where A has 0, 2, 4 successes: >= 1 on two, mixed on one (k_A = 2)
    assert out["directions"]["a_to_b"] == pytest.approx(
        {"receiver_all_fail": 3, "peer_any_success_share": 2 / 3, "peer_mixed_share": 1 / 3})
    # A fails all on problems 0, 1, 2, where B has 0, 3, 4
    assert out["directions"]["b_to_a"] == pytest.approx(
        {"receiver_all_fail": 3, "peer_any_success_share": 2 / 3, "peer_mixed_share": 1 / 3})
    expected = [[0] * 5 for _ in range(5)]  # [k_B][k_A]
    for ka, kb in ((0, 0), (0, 3), (0, 4), (2, 0), (4, 0), (1, 2)):
        expected[kb][ka] = 1
    assert out["matrix"] == expected
    no_fail = comp.fig1({"a": [1, 2], "b": [0, 1]}, 2)["directions"]["b_to_a"]
    assert no_fail == {"receiver_all_fail": 0, "peer_any_success_share": None, "peer_mixed_share": None}


def test_gate_stats_on_known_s():
    s = [0.45, 0.55, 0.65, 0.8, 0.85, 0.95, None, 1.2]  # None: a text that re-tokenised to nothing
    correct = [1, 0, 1, 0, 1, 0, 1, 0]
    records = [{"s": s[:4], "correct": correct[:4], "recv_mean_logprob": [-1.0, -2.0, -1.0, -2.0],
                "src_mean_logprob": [-0.5] * 4},
               {"s": s[4:], "correct": correct[4:], "recv_mean_logprob": [-1.0, -2.0, None, -2.0],
                "src_mean_logprob": [-0.5, -0.5, -0.7, -0.5]}]
    g = comp.gate_stats(records)
    assert (g["responses"], g["correct"], g["not_scored"]) == (8, 4, 1)
    # all 8 (the unscored one is never admitted); s == 0.8 is not > 0.8 (Eq. 8's strict floor)
    assert g["admitted"]["all"] == pytest.approx({"0.5": 6 / 8, "0.6": 5 / 8, "0.7": 4 / 8, "0.8": 3 / 8, "0.9": 2 / 8})
    # correct: 0.45, 0.65, 0.85, None; wrong: 0.55, 0.8, 0.95, 1.2
    assert g["admitted"]["correct"] == pytest.approx({"0.5": 2 / 4, "0.6": 2 / 4, "0.7": 1 / 4, "0.8": 1 / 4, "0.9": 0})
    assert g["admitted"]["wrong"] == pytest.approx({"0.5": 4 / 4, "0.6": 3 / 4, "0.7": 3 / 4, "0.8": 2 / 4, "0.9": 2 / 4})
    # 7 scored values sorted 0.45 0.55 0.65 0.8 0.85 0.95 1.2: median the 4th; 10% at rank 0.6, 90% at rank 5.4
    assert g["s"]["all"] == pytest.approx({"p10": 0.45 + 0.6 * 0.10, "median": 0.8, "p90": 0.95 + 0.4 * 0.25})
    assert g["s"]["correct"]["median"] == pytest.approx(0.65)
    assert g["s"]["wrong"]["median"] == pytest.approx((0.8 + 0.95) / 2)
    assert g["mean_logprob"] == pytest.approx({"receiver": -11 / 7, "source": -0.5})
    empty = comp.gate_stats([])
    assert empty["s"]["all"] is None and empty["admitted"]["all"]["0.8"] is None


# ---------------------------------------------------------------- Eq. 7 against an independent forward pass

def test_s_is_exp_of_receiver_minus_source_mean_logprob(tmp_path, llama, char_tok_a):
    problems = [tasks.Problem("t/0", "t", "Q:12+7=", "19"), tasks.Problem("t/1", "t", "Q:3*4=", "12")]
    src = {"t/0": {"texts": ["\\boxed{19}", "1+7=8 \\boxed{18}"], "finished": [True, False], "rewards": [1.0, 0.0],
                   "mean_logprob": [-0.3, -1.1]},
           "t/1": {"texts": ["", "4*3=12"], "finished": [False, True], "rewards": [0.0, 1.0],
                   "mean_logprob": [-0.2, -0.9]}}
    recv = {q: {"rewards": [0.0, 0.0]} for q in src}
    cfg = comp.argparse.Namespace(n=2, chunk=1, score="all", temperature=0.7, score_batch=None)
    path = str(tmp_path / "scores_a_to_b.jsonl")
    scores = comp.score_direction("A -> B", src, recv, lambda: (llama, char_tok_a), problems, cfg, path)
    assert runlog.read_jsonl(path) == [scores["t/0"], scores["t/1"]]
    for p in problems:
        for i in range(2):
            text, done = src[p.id]["texts"][i], src[p.id]["finished"][i]
            resp = char_tok_a.encode(text, add_special_tokens=False) + ([char_tok_a.eos_token_id] if done else [])
            if not resp:  # nothing to score: not scored, as graft_min drops it
                assert scores[p.id]["s"][i] is None
                continue
            prompt = char_tok_a.encode(p.question)
            with torch.no_grad():
                logits = llama(torch.tensor([prompt + resp])).logits[0].double() / 0.7  # [L, V], no padding at all
            lp = torch.log_softmax(logits, -1)[len(prompt) - 1:-1].gather(-1, torch.tensor(resp)[:, None])
            expected = math.exp(lp.mean().item() - src[p.id]["mean_logprob"][i])
            assert scores[p.id]["s"][i] == pytest.approx(expected, rel=1e-5)
            assert scores[p.id]["recv_tokens"][i] == len(resp)
    # Eq. 4 from the rewards: the receiver failed all on both; the source's group is mixed on both
    assert scores["t/0"]["candidate"] and scores["t/1"]["candidate"]
    assert scores["t/1"]["correct"] == [0.0, 1.0]


# ---------------------------------------------------------------- problems

def test_problems_are_chosen_by_seed_and_math_levels_filter(tmp_path, gsm8k_file):
    first = comp.select_problems("gsm8k", gsm8k_file, 4, seed=0)
    assert [p.id for p in first] == [p.id for p in comp.select_problems("gsm8k", gsm8k_file, 4, seed=0)]
    assert len({p.id for p in first}) == 4
    assert any([p.id for p in comp.select_problems("gsm8k", gsm8k_file, 4, seed=s)] != [p.id for p in first]
               for s in range(1, 4))
    path = tmp_path / "math.jsonl"
    levels = ["Level 1", "Level 3", "Level ?", "Level 2", 1, "Level 5"]  # MATH train's strings, MATH-500's ints
    path.write_text("".join(json.dumps({"problem": f"P{i}", "level": lv, "solution": f"so \\boxed{{{i}}}"}) + "\n"
                            for i, lv in enumerate(levels)))
    low = comp.select_problems("math", str(path), 3, seed=0, levels=[1, 2])
    assert sorted(p.answer for p in low) == ["0", "3", "4"]  # rows 0, 3, 4: levels 1, 2, 1
    assert all(p.question.startswith(f"P{p.answer} ") for p in low)  # the level read from the problem's own row
    with pytest.raises(comp.UsageError, match="--k 4: .* has only 3 problems of levels 1,2; give --k 3"):
        comp.select_problems("math", str(path), 4, seed=0, levels=[1, 2])
    with pytest.raises(comp.UsageError, match="--math-levels: gsm8k has no MATH levels"):
        comp.select_problems("gsm8k", gsm8k_file, 2, seed=0, levels=[1])


# ---------------------------------------------------------------- the run: known numbers, resume, refusal

def test_run_with_a_stand_in_sampler_gives_the_hand_counted_report(tmp_path, model_dirs, gsm8k_file, capsys):
    calls = []
    report = comp.run(args(model_dirs, gsm8k_file, str(tmp_path / "real_c")), sampler=stand_in(calls))
    assert calls == [(0, 2)] * 3 + [(1, 2)] * 3  # 6 problems in chunks of 2, per model
    assert report["models"]["a"]["pass@1"] == pytest.approx(4 / 12)
    assert report["models"]["b"]["pass@1"] == pytest.approx(5 / 12)
    # B all-fail on rows 0, 3, 4 (k_A 0, 1, 2); A all-fail on rows 0, 1, 2 (k_B 0, 1, 2)
    for d in ("a_to_b", "b_to_a"):
        v = report["directions"][d]
        assert (v["receiver_all_fail"], v["candidates"]) == (3, 1)
        assert (v["peer_any_success_share"], v["peer_mixed_share"]) == pytest.approx((2 / 3, 1 / 3))
        assert (v["eq4_candidates"]["responses"], v["eq4_candidates"]["correct"]) == (2, 1)  # one mixed group of 2
        assert v["all_peer_responses"] is None  # --score candidates
    assert report["matrix"] == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]  # [k_B][k_A]
    lines = runlog.read_jsonl(str(tmp_path / "real_c" / "scores_a_to_b.jsonl"))
    assert [r["id"] for r in lines] == ["gsm8k/3"]
    assert lines[0]["src_mean_logprob"] == [-0.5, -0.5]
    assert all(s == pytest.approx(math.exp(r - (-0.5))) for s, r in zip(lines[0]["s"], lines[0]["recv_mean_logprob"]))
    assert json.load(open(tmp_path / "real_c.json"))["matrix"] == report["matrix"]
    for name in ("heatmap", "compatibility", "admitted"):
        assert (tmp_path / f"real_c_{name}.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "A -> B" in out and "0.667" in out and "k_B=0" in out

    calls.clear()  # a rerun finds everything done: nothing sampled, nothing scored, the same report
    again = comp.run(args(model_dirs, gsm8k_file, str(tmp_path / "real_c"), "--score", "all", "--chunk", "3"),
                     sampler=stand_in(calls))
    assert calls == []
    assert again["matrix"] == report["matrix"]
    assert again["directions"]["a_to_b"]["all_peer_responses"]["responses"] == 12  # --score all added the rest
    assert again["directions"]["a_to_b"]["eq4_candidates"] == report["directions"]["a_to_b"]["eq4_candidates"]


def test_a_killed_run_resumes_to_the_same_samples(tmp_path, model_dirs, gsm8k_file):
    """Real sampling on the tiny random models: killed during its second chunk, a torn line at the end of the file;
    the resumed run samples only the missing problems, and its samples equal an unbroken run's."""
    whole = comp.run(args(model_dirs, gsm8k_file, str(tmp_path / "whole"), "--threads", "1"))
    calls = []

    def dies_on_second_chunk(*a, **kw):
        calls.append(len(a[2]))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return rollout.sample_groups(*a, **kw)

    cut = str(tmp_path / "cut")
    with pytest.raises(KeyboardInterrupt):
        comp.run(args(model_dirs, gsm8k_file, cut, "--threads", "1"), sampler=dies_on_second_chunk)
    with open(os.path.join(cut, "samples_a.jsonl"), "a") as f:
        f.write('{"id": "gsm8k/')  # torn by the kill
    calls.clear()
    resumed = comp.run(args(model_dirs, gsm8k_file, cut, "--threads", "1"), sampler=lambda *a, **kw: (
        calls.append(len(a[2])), rollout.sample_groups(*a, **kw))[1])
    assert calls == [2, 2] + [2, 2, 2]  # A's two missing chunks, then all of B's
    for m in "ab":
        a = {r["id"]: r for r in runlog.read_jsonl(os.path.join(cut, f"samples_{m}.jsonl"))}
        b = {r["id"]: r for r in runlog.read_jsonl(str(tmp_path / "whole" / f"samples_{m}.jsonl"))}
        assert sorted(a) == sorted(b) and len(a) == 6
        for q in a:
            assert (a[q]["texts"], a[q]["rewards"]) == (b[q]["texts"], b[q]["rewards"])
            assert a[q]["mean_logprob"] == pytest.approx(b[q]["mean_logprob"], abs=1e-5)
    assert resumed["matrix"] == whole["matrix"]


def test_other_settings_in_the_same_folder_are_refused(tmp_path, model_dirs, gsm8k_file):
    out = str(tmp_path / "real_c")
    with pytest.raises(SystemExit, match="experiments/complementarity.py: model .*nope.* is not a local folder"):
        comp.main(["--model-a", str(tmp_path / "nope"), "--model-b", model_dirs[1], "--data-file", gsm8k_file,
                   "--k", "6", "--out", out])  # stopped before any sample: the folder may still be used with other settings
    comp.run(args(model_dirs, gsm8k_file, out), sampler=stand_in([]))
    with pytest.raises(SystemExit) as e:
        comp.main(["--model-a", model_dirs[0], "--model-b", model_dirs[1], "--data-file", gsm8k_file, "--k", "6",
                   "--max-new-tokens", "8", "--n", "3", "--temperature", "0.6", "--out", out])
    message = str(e.value)
    assert message.startswith(f"experiments/complementarity.py: {os.path.join(out, 'config.json')}: 2 setting(s) differ")
    assert "n: saved 2, now 3" in message and "temperature: saved 1.0, now 0.6" in message
    assert "another folder (--out)" in message
    os.remove(os.path.join(out, "config.json"))
    with pytest.raises(SystemExit, match="real_c: holds samples or scores but no config.json"):
        comp.main(["--model-a", model_dirs[0], "--model-b", model_dirs[1], "--data-file", gsm8k_file, "--k", "6",
                   "--out", out])


def test_bad_lines_and_missing_data_name_the_fix(tmp_path, model_dirs, capsys):
    path = tmp_path / "samples_a.jsonl"
    path.write_text('{"id": "x/0"}\nnot json\n{"id": "x/2"}\n')
    with pytest.raises(comp.UsageError, match=r"samples_a.jsonl, line 2: not valid JSON .* delete the file"):
        comp.read_done(str(path))
    with pytest.raises(SystemExit):
        comp.parse_args(["--model-a", model_dirs[0], "--model-b", model_dirs[1], "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert "gsm8k_test.jsonl: not found; run `python -m machinery.pairs fetch`" in err


# ---------------------------------------------------------------- the CLI, end to end

def test_cli_end_to_end_on_tiny_models(tmp_path, model_dirs, gsm8k_file, capsys):
    out = str(tmp_path / "real_complementarity")
    report = comp.main(["--model-a", model_dirs[0], "--model-b", model_dirs[1], "--data-file", gsm8k_file,
                        "--k", "3", "--n", "2", "--max-new-tokens", "6", "--score", "all", "--out", out])
    saved = json.load(open(out + ".json"))
    assert saved["problems"] == report["problems"] and len(saved["problems"]) == 3
    assert saved["settings"]["n"] == 2 and saved["settings"]["data"] == "gsm8k"
    for d in ("a_to_b", "b_to_a"):
        assert saved["directions"][d]["all_peer_responses"]["responses"] == 6  # every peer response scored
    assert set(saved["seconds"]) >= {"sample_a", "sample_b", "score_a_to_b", "score_b_to_a"}
    for name in ("heatmap", "compatibility", "admitted"):
        assert os.path.getsize(f"{out}_{name}.png") > 1000
    assert sorted(os.listdir(out)) == ["config.json", "samples_a.jsonl", "samples_b.jsonl", "scores_a_to_b.jsonl",
                                       "scores_b_to_a.jsonl"]
    assert "Fig. 1" in capsys.readouterr().out
