"""The README and docs/ show what the committed scripts wrote, their links resolve, their commands run and
name today's paths, and CI runs the README's test command."""

import os
import re
import shlex
import subprocess
import sys

from machinery import plots, runlog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def test_results_tables_are_what_reproduce_wrote():
    results = read("results", "tiny_results.md").strip()
    assert results.startswith("### Tiny-pair results")
    assert results in read("docs", "results.md"), "docs/results.md's tables differ from results/tiny_results.md"
    headline = read("results", "headline.md").strip()
    assert headline in read("README.md"), "README's results table differs from results/headline.md"


def test_readme_is_short_and_its_links_resolve():
    readme = read("README.md")
    assert len(readme) <= 9_000, f"README.md has {len(readme)} characters; move depth into docs/"
    for doc in ("tiny_world", "results", "runs", "real_models", "verifier", "differences"):
        assert f"](docs/{doc}.md)" in readme, f"README does not link docs/{doc}.md"
    for folder, text in [("", readme)] + [("docs", read("docs", f)) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]:
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if not target.startswith("http"):
                assert os.path.exists(os.path.join(ROOT, folder, target)), f"{folder or 'README'}: broken link {target}"


def test_trl_bench_in_docs_and_readme_is_what_the_bench_printed():
    docs = read("docs", "runs.md")
    for name in ("trl_bench.txt", "trl_bench_qwen.txt"):
        for line in read("results", name).strip().splitlines():
            if line.strip():
                assert f"\n    {line}\n" in docs, f"docs/runs.md lacks the line {line!r} of results/{name}"
    printed = read("results", "trl_bench.txt")
    ratio = re.search(r"ours / TRL, seconds per step: (\d+\.\d+)", printed).group(1)
    assert f"{ratio} of TRL's time" in read("README.md"), f"README does not quote the bench's ratio {ratio}"


def test_ci_runs_exactly_the_readme_test_command():
    command = "pip install -r requirements-dev.txt && python -m pytest -q"
    assert f"\n    {command}\n" in read("README.md")
    assert f"\n{command}\n" in read(".ci", "run")


def test_coder_run_in_readme_and_docs_is_what_its_logs_hold():
    """README's --pair coder line and docs/real_models.md's table quote results/coder/ (issue 39)."""
    evals = runlog.read_jsonl(os.path.join(ROOT, "results", "coder", "evals.jsonl"))
    sums = lambda e, key: [e[key][f] if key else e[f] for f in ("add", "addc")]  # noqa: E731
    first, last = evals[0], evals[-1]
    pass_sums = lambda e: sum(sums(e, None)) / 2  # noqa: E731  # pass@1 over add and addc, 60 samples each
    right_among_finished = lambda e: sum(sums(e, None)) / sum(sums(e, "finished"))  # noqa: E731
    line = (f"from {pass_sums(first):.2f} to {pass_sums(last):.2f} at T 0.6", f"right among finished: "
            f"{right_among_finished(first):.2f}, then {right_among_finished(last):.2f}")
    readme = " ".join(read("README.md").split())
    assert all(part in readme for part in line), f"README's coder line does not say {line}"
    docs = read("docs", "real_models.md")
    for row in plots.eval_table(evals)[2:]:  # the table without its model column
        cells = row.split(" | ")
        assert " | ".join(cells[:1] + cells[2:]) in docs, f"docs/real_models.md lacks the evaluation row {row}"


def readme_python_commands():
    """Every command of README's indented code blocks that starts with `python `, one per `&&` part, its
    trailing `# comment` cut off."""
    commands = []
    for line in read("README.md").splitlines():
        if line.startswith("    "):
            for part in line.split("&&"):
                part = part.split(" #")[0].strip()
                if part.startswith("python "):
                    commands.append(part)
    return commands


def test_readme_commands_run():
    """Each `python graft_min.py ...` and `python -m ...` line of README's code blocks runs with `--help` appended,
    from the repository root, and exits 0: the file or module exists and argparse takes the flags before `--help`
    (their choices and types included). --help suffices here: the main job's path, `python graft_min.py --pair tiny`
    at fewer steps, runs for real elsewhere in the suite (tests/test_runs.py, tests/test_ddp.py), and the real-model
    commands need downloads or a GPU."""
    commands = readme_python_commands()
    assert "python graft_min.py --pair tiny" in commands and "python -m pytest -q" in commands, commands
    failed = []
    for command in commands:
        argv = [sys.executable] + shlex.split(command)[1:] + ["--help"]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode != 0:
            failed.append(f"{command} --help: exit {done.returncode}\n{done.stderr[-2000:]}")
    assert not failed, "\n".join(failed)


def test_docs_name_the_moved_files_by_their_new_paths():
    """Since issue 57 the machinery and the experiments live one folder down: commands read `python -m
    machinery.pairs` and `python -m experiments.reproduce`, imports `from machinery import settings`, prose names
    `experiments/reproduce.py`; and every `python X.py` or `python -m project.module` there names a file that exists."""
    moved = {f[:-3]: folder for folder in ("machinery", "experiments")
             for f in os.listdir(os.path.join(ROOT, folder)) if f.endswith(".py") and f != "__init__.py"}
    names = "|".join(sorted(moved))
    rules = [(rf"\bpython3? ({names})\.py\b", "python -m {folder}.{module}"),
             (rf"\bpython3? -m ({names})\b", "python -m {folder}.{module}"),
             (rf"\bfrom ({names}) import\b", "from {folder}.{module} import"),
             (rf"(?<![\w/.-])(?<!python )(?<!python3 )({names})\.py\b", "{folder}/{module}.py")]
    wrong = []
    pages = [f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]
    for name in sorted(pages):
        text = read("docs", name)
        for pattern, new in rules:
            wrong += [f"docs/{name}: {m.group(0)!r} should read "
                      f"{new.format(folder=moved[m.group(1)], module=m.group(1))!r}" for m in re.finditer(pattern, text)]
        for m in re.finditer(rf"\b(from\s+[\w.]+\s+)?import ({names})\b", text):  # `from machinery import x` is right
            if not m.group(1):
                wrong.append(f"docs/{name}: {m.group(0)!r} should read 'from {moved[m.group(2)]} import {m.group(2)}'")
        for m in re.finditer(r"\bpython3? ([\w./-]+\.py)\b", text):
            if not os.path.exists(os.path.join(ROOT, m.group(1))):
                wrong.append(f"docs/{name}: no such file: {m.group(0)!r}")
        for m in re.finditer(r"\bpython3? -m ((?:machinery|experiments|bench)\.\w+)", text):
            if not os.path.exists(os.path.join(ROOT, m.group(1).replace(".", "/") + ".py")):
                wrong.append(f"docs/{name}: no such module: {m.group(0)!r}")
    assert not wrong, "\n".join(wrong)


def anchor(heading):
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_anchor_follows_githubs_rule():
    assert anchor("The presets' numbers") == "the-presets-numbers"
    assert anchor("How machinery/settings.py lays out the flags") == "how-machinerysettingspy-lays-out-the-flags"


def test_the_codes_pointers_into_docs_resolve():
    """Docstrings and comments state contracts and send a reader to docs/<page>.md#<section> for the measured
    figures and the history behind a choice (issue 57): each such pointer names a page and a heading that exist."""
    sources = [os.path.join(folder, f) for folder in ("", "machinery", "experiments", "bench")
               for f in os.listdir(os.path.join(ROOT, folder)) if f.endswith(".py")]
    broken = []
    for path in sources:
        for page, section in re.findall(r"docs/([\w-]+\.md)#([\w-]+)", read(path)):
            headings = re.findall(r"^#+ (.+)$", read("docs", page), re.M) if os.path.exists(
                os.path.join(ROOT, "docs", page)) else []
            if section not in {anchor(h) for h in headings}:
                broken.append(f"{path}: docs/{page}#{section}")
    assert not broken, "\n".join(broken)
