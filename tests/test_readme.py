"""The README shows what the committed scripts wrote, and CI runs the README's test command."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def test_readme_results_table_is_what_reproduce_wrote():
    results = read("results", "tiny_results.md").strip()
    assert results.startswith("### Tiny-pair results")
    assert results in read("README.md"), "README's results table differs from results/tiny_results.md"


def test_ci_runs_exactly_the_readme_test_command():
    command = "pip install -r requirements-dev.txt && python -m pytest -q"
    assert f"\n    {command}\n" in read("README.md")
    assert f"\n{command}\n" in read(".ci", "run")
