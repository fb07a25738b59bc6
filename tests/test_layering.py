"""Imports point down (README, "Files"): the method's math imports nothing of the project, machinery/ imports the
math and itself, graft_min.py both, experiments/ all of those, bench/ anything; lazy imports included, and no
import cycle anywhere, inside a folder included."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bottom to top; a file may import files of its own tier (without a cycle) or of a lower one
TIERS = [["loss", "rollout", "verifier"], ["machinery/"], ["graft_min"], ["experiments/"], ["bench/"]]
FOLDERS = ("machinery", "experiments", "bench")


def project_files():
    """Every Python file of the project outside tests/, as 'graft_min' or 'machinery/settings'."""
    files = {f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")}
    for folder in FOLDERS:
        files |= {f"{folder}/{f[:-3]}" for f in os.listdir(os.path.join(ROOT, folder))
                  if f.endswith(".py") and f != "__init__.py"}
    return files


def tier(name):
    return next(i for i, names in enumerate(TIERS) for n in names if name == n or name.startswith(n))


def project_imports(path, files):
    """The project files that `path` imports, at the top or inside a function: `import loss`, `from machinery
    import settings, tasks`, `from machinery.pairs import Policy`."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name.replace(".", "/") for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module.replace(".", "/")
            found |= {module} | {f"{module}/{a.name}" for a in node.names}
    return {m for m in found if m in files}


def graph():
    files = project_files()
    return {name: project_imports(os.path.join(ROOT, name + ".py"), files) for name in files}


def test_the_top_level_is_the_method():
    assert sorted(f for f in os.listdir(ROOT) if f.endswith(".py")) == \
        ["graft_min.py", "loss.py", "rollout.py", "verifier.py"]


def test_every_python_file_has_a_tier():
    untiered = [name for name in project_files() if not any(name == n or name.startswith(n) for t in TIERS for n in t)]
    assert not untiered, f"give these files a tier in TIERS (and in README's layering line): {untiered}"


def test_each_file_imports_only_its_own_tier_or_lower():
    wrong = [f"{name}.py imports {dep}.py (tier {tier(dep)} > {tier(name)})"
             for name, deps in graph().items() for dep in deps if tier(dep) > tier(name)]
    assert not wrong, "\n".join(wrong)


def test_the_math_imports_nothing_of_the_project():
    assert {name: deps for name, deps in graph().items() if tier(name) == 0 and deps} == {}


def test_no_import_cycle():
    edges, done, path = graph(), set(), []

    def visit(name):
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for dep in sorted(edges[name]):
            visit(dep)
        path.pop()
        done.add(name)

    for name in sorted(edges):
        visit(name)


def test_the_checker_sees_lazy_imports_and_both_spellings(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\n\ndef f():\n    import graft_min\n    from machinery import tasks, runlog\n"
                    "    from machinery.pairs import Policy\n")
    files = {"graft_min", "machinery/tasks", "machinery/runlog", "machinery/pairs", "machinery/settings"}
    assert project_imports(str(path), files) == {"graft_min", "machinery/tasks", "machinery/runlog", "machinery/pairs"}


def test_the_checker_finds_a_cycle(monkeypatch):
    monkeypatch.setitem(globals(), "graph", lambda: {"a": {"b"}, "b": {"c"}, "c": {"a"}})
    try:
        test_no_import_cycle()
    except AssertionError as e:
        assert "a -> b -> c -> a" in str(e)
    else:
        raise AssertionError("the cycle a -> b -> c -> a was not found")


def test_readme_states_the_same_layering():
    line = next(l for l in open(os.path.join(ROOT, "README.md")).read().splitlines() if l.startswith("Layering,"))
    stated = [sorted(re.findall(r"`([\w/]+)(?:\.py)?`", part)) for part in line.split(":", 1)[1].split("<")]
    assert stated == [sorted(t) for t in TIERS], f"README's layering {stated} differs from this test's {TIERS}"


METHOD = ("graft_min.py", "loss.py", "rollout.py", "verifier.py")


def test_the_method_files_read_in_one_sitting():
    """graft_min.py is Algorithm 1 and the entry point (<= 400 lines, train_step <= 40), and the method files'
    docstrings state contracts: their mean length (module, classes, functions) is at most 250 characters."""
    source = open(os.path.join(ROOT, "graft_min.py")).read()
    assert len(source.splitlines()) <= 400
    step = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "train_step")
    assert step.end_lineno - step.lineno + 1 <= 40
    numbered = re.findall(r"^ +# (\d)\. ", ast.get_source_segment(source, step), re.M)
    assert numbered == ["1", "2", "3", "4", "5"], numbered  # Algorithm 1's steps, in order
    lengths = []
    for name in METHOD:
        tree = ast.parse(open(os.path.join(ROOT, name)).read())
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        lengths += [len(ast.get_docstring(n)) for n in nodes if ast.get_docstring(n)]
    assert sum(lengths) / len(lengths) <= 250, sum(lengths) / len(lengths)
