"""The README and docs/ show what the committed scripts wrote, their links resolve, and CI runs
the README's test command."""

import os
import re

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
    assert len(readme) <= 12_500, f"README.md has {len(readme)} characters; move depth into docs/"
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
