"""Every flag with a range is refused when the arguments are parsed, before any model loads: argparse's error
(exit 2) names the flag, the value and the allowed range (settings.RANGES)."""

import os
import subprocess
import sys

import pytest

from machinery import settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BAD = [  # (flags, what the message must say)
    (["--steps", "0"], "--steps 0: out of range; give an integer >= 1"),
    (["--prompts-per-step", "0"], "--prompts-per-step 0: out of range; give an integer >= 1"),
    (["--n", "1"], "--n 1: out of range; give an integer >= 2"),
    (["--n", "0"], "--n 0: out of range; give an integer >= 2"),
    (["--group-size", "1"], "--n 1: out of range; give an integer >= 2"),
    (["--minibatches", "0"], "--minibatches 0: out of range; give an integer >= 1"),
    (["--minibatches", "9", "--prompts-per-step", "8"], "--minibatches 9: more than the 8 prompts per step"),
    (["--lr", "-1"], "--lr -1.0: out of range; give a number > 0"),
    (["--lr", "0"], "--lr 0.0: out of range; give a number > 0"),
    (["--lr-a", "-0.1"], "--lr-a -0.1: out of range; give a number > 0"),
    (["--lr-b", "0"], "--lr-b 0.0: out of range; give a number > 0"),
    (["--warmup-steps", "-1"], "--warmup-steps -1: out of range; give an integer >= 0"),
    (["--weight-decay", "-0.01"], "--weight-decay -0.01: out of range; give a number >= 0"),
    (["--grad-clip", "0"], "--grad-clip 0.0: out of range; give a number > 0"),
    (["--eps-low", "1"], "--eps-low 1.0: out of range; give a number in [0, 1)"),
    (["--eps-low", "-0.2"], "--eps-low -0.2: out of range; give a number in [0, 1)"),
    (["--eps-high", "-0.28"], "--eps-high -0.28: out of range; give a number >= 0"),
    (["--delta", "-0.5"], "--delta -0.5: out of range; give a number >= 0"),
    (["--temperature", "0"], "--temperature 0.0: out of range; give a number > 0"),
    (["--max-new-tokens", "0"], "--max-new-tokens 0: out of range; give an integer >= 1"),
    (["--eval-every", "0"], "--eval-every 0: out of range; give an integer >= 1"),
    (["--eval-samples", "0"], "--eval-samples 0: out of range; give an integer >= 1"),
    (["--eval-temperature", "-1"], "--eval-temperature -1.0: out of range; give a number > 0"),
    (["--eval-top-p", "0"], "--eval-top-p 0.0: out of range; give a number in (0, 1]"),
    (["--eval-top-p", "1.5"], "--eval-top-p 1.5: out of range; give a number in (0, 1]"),
    (["--eval-problems", "0"], "--eval-problems 0: out of range; give an integer >= 1"),
    (["--ckpt-every", "0"], "--ckpt-every 0: out of range; give an integer >= 1"),
    (["--threads", "0"], "--threads 0: out of range; give an integer >= 1"),
    (["--gen-batch", "0"], "--gen-batch 0: out of range; give an integer >= 1"),
    (["--micro-batch", "-2"], "--micro-batch -2: out of range; give an integer >= 1"),
    (["--max-prompt-tokens", "0"], "--max-prompt-tokens 0: out of range; give an integer >= 1"),
    (["--memory-gib", "0"], "--memory-gib 0.0: out of range; give a number > 0"),
    (["--weak-habit", "1.5"], "--weak-habit 1.5: a share of traces, give a number in [0, 1]"),
    (["--strong-habit", "-0.1"], "--strong-habit -0.1: a share of traces, give a number in [0, 1]"),
]


@pytest.mark.parametrize("flags, message", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_each_out_of_range_flag_is_an_argparse_error_naming_it(flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        settings.parse_args(flags)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_every_range_is_tried_here():
    tried = {f[0].lstrip("-").replace("-", "_") for f, _ in BAD} - {"group_size"}
    assert tried == set(settings.RANGES)


def test_the_edges_of_each_range_are_allowed():
    cfg = settings.parse_args(["--n", "2", "--minibatches", "8", "--prompts-per-step", "8", "--warmup-steps", "0",
                               "--weight-decay", "0", "--eps-low", "0", "--eps-high", "0", "--delta", "0",
                               "--eval-top-p", "1", "--weak-habit", "0", "--strong-habit", "1", "--steps", "1"])
    assert (cfg.n, cfg.minibatches, cfg.delta, cfg.eval_top_p) == (2, 8, 0.0, 1.0)


def test_the_cli_refuses_before_loading_a_model(tmp_path):
    # --pair cpu would fetch and load two real models first: here from an empty cache and an unreachable package
    # index, so that a fetch or a load would end in another error; the refusal comes first, with exit code 2
    cache = tmp_path / "cache"
    env = {**os.environ, "GRAFT_MIN_CACHE": str(cache), "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_NO_INDEX": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "graft_min.py", "--pair", "cpu", "--n", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # a guard against a hang, not a timing
    assert proc.returncode == 2 and "--n 1: out of range" in proc.stderr, proc.stderr[-2000:]
    assert not cache.exists()  # nothing fetched, nothing built


def test_a_bad_data_file_is_one_line_from_the_main_jobs_workers_as_from_one_process(tiny_pair_ready, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "1+1?", "answer": "#### 2"}\n{not json\n')
    flags = ["--pair", "tiny", "--data", "gsm8k", "--train-data", str(bad), "--eval-data", f"gsm8k={bad}",
             "--steps", "1", "--threads", "1"]
    lines = {}
    for method in ("compare", "graft"):  # compare: GRPO and GRAFT in two worker processes; graft: this process
        proc = subprocess.run([sys.executable, "graft_min.py", *flags, "--method", method, "--out",
                               str(tmp_path / method)], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        lines[method] = proc.stderr.strip().splitlines()[-1]
    assert lines["compare"] == lines["graft"] == f"graft_min: {bad}:2: not JSON (Expecting property name enclosed " \
                                                 f"in double quotes); expected JSON Lines, one object per line"


@pytest.mark.parametrize("flags, message", [
    (["--pair", "coder", "--method", "graft"], "--method graft: --pair coder is one model with no peer; only --method grpo"),
    (["--pair", "coder", "--method", "compare"], "--method compare: --pair coder is one model with no peer"),
    (["--pair", "coder", "--model-b", "some/folder"], "--model-b some/folder: --pair coder trains one model (A)"),
    (["--pair", "coder", "--train-data", "x.jsonl"], "--data arith: --train-data, --eval-data and --eval-sets need"),
    (["--data", "arith", "--eval-sets", "gsm8k"], "--data arith: --train-data, --eval-data and --eval-sets need"),
    (["--data", "arith"], "--data arith: the tiny pair's tokenizers know only the tiny world's characters"),
])
def test_the_one_model_preset_refuses_what_it_cannot_run(flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        settings.parse_args(flags)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_the_coder_preset_passes_the_parse_time_checks():
    cfg = settings.parse_args(["--pair", "coder"])
    preset = settings.PRESETS["coder"]
    assert (cfg.method, cfg.data, cfg.model_b) == ("grpo", "arith", None)
    assert all(getattr(cfg, k) == v for k, v in preset.items())
    assert cfg.prompts_per_step % cfg.minibatches == 0  # each minibatch holds whole groups


def test_the_table_2_ablation_flags_are_off_by_default_and_run_settings(capsys):
    base = ["--model-a", "a", "--model-b", "b"]  # model paths given: settings.run_config loads nothing
    flags = {"seq_ratio": "--seq-ratio", "random_prompts": "--random-prompts", "random_admission": "--random-admission"}
    default = settings.parse_args(base)
    assert all(getattr(default, key) is False for key in flags)
    for key, flag in flags.items():
        config = settings.run_config(settings.parse_args(base + [flag]), "graft")
        assert config[key] is True and all(config[k] is False for k in flags if k != key)  # recorded in config.json
    with pytest.raises(SystemExit) as e:  # pooling needs the receiver's group all-fail; a drawn prompt's need not be
        settings.parse_args(base + ["--random-prompts", "--pooled"])
    assert e.value.code == 2 and "--random-prompts with --pooled" in capsys.readouterr().err


def test_every_flag_sits_in_a_named_group_with_one_line_of_help():
    parser = settings.build_parser()
    defaults = {"options", "optional arguments", "positional arguments"}  # argparse's own (3.10+, before, both)
    grouped = {id(a) for g in parser._action_groups if g.title not in defaults for a in g._group_actions}
    loose = [a.option_strings for a in parser._actions if a.dest != "help" and id(a) not in grouped]
    assert not loose, f"flags outside a named group: {loose}"
    long = [(a.option_strings, a.help) for a in parser._actions if not a.help or "\n" in a.help or len(a.help) > 100]
    assert not long, f"give each flag one line of help, at most 100 characters: {long}"
