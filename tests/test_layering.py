"""The files import only files below them (README, "Files": the layering line), lazy imports included:
no import cycle, and graft_min.py is never imported by what it builds on."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bottom to top; a file may import files of lower levels only. README names bench/'s files as `bench/`.
LAYERS = [["verifier", "loss", "wheels", "ddp"], ["rollout"], ["tasks"], ["pairs", "memory"], ["tiny_world"], ["runlog"], ["plots"],
          ["settings", "complementarity"], ["graft_min"], ["reproduce"], ["regimes"], ["bench/bench_step", "bench/bench_verifier", "bench/bench_small", "bench/bench_ddp",
           "bench/bench_trl"],
          ["bench/bench_real", "bench/bench_gpu"]]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}
MODULE = {os.path.basename(name): name for name in LEVEL}  # import name -> file name


def project_imports(path):
    """The project modules that `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return {MODULE[m] for m in found if m in MODULE}


def test_every_python_file_has_a_level():
    files = {f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")}
    files |= {f"bench/{f[:-3]}" for f in os.listdir(os.path.join(ROOT, "bench")) if f.endswith(".py")}
    assert files == set(LEVEL), f"give every file a level in LAYERS (and in README's layering line): {files ^ set(LEVEL)}"


def test_each_file_imports_only_files_below_it():
    wrong = [f"{name}.py imports {dep}.py (level {LEVEL[dep]} >= {LEVEL[name]})"
             for name in LEVEL for dep in project_imports(os.path.join(ROOT, name + ".py")) if LEVEL[dep] >= LEVEL[name]]
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_lazy_imports(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\n\ndef f():\n    import graft_min\n    from tasks import Problem\n")
    assert project_imports(str(path)) == {"graft_min", "tasks"}


def test_readme_states_the_same_layering():
    line = next(l for l in open(os.path.join(ROOT, "README.md")).read().splitlines() if l.startswith("Layering,"))
    stated = [sorted(re.findall(r"`([\w]+)/?`", part)) for part in line.split(":", 1)[1].split("<")]
    ours = []
    for names in LAYERS:
        group = sorted({n.split("/")[0] for n in names})
        if not ours or ours[-1] != group:
            ours.append(group)
    assert stated == ours, f"README's layering {stated} differs from this test's {ours}"
