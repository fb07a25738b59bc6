"""The teaching notebooks in notebooks/: each one runs top to bottom without an error (executed with
nbclient in a fresh kernel of this very interpreter, from notebooks/), and each is stored without
outputs so that git diffs stay readable. Executed copies, outputs and plots included, are kept in
docs/notebooks/ for reading in a browser (GitHub renders them) without running anything; a test checks
that each copy holds its notebook's current cells, every code cell executed.

The tiny pair is built (or found in the cache) once, up front, so that no notebook pays for it:
the kernels inherit this process's environment, so $GRAFT_MIN_CACHE applies to them too.

Strip outputs after running a notebook in Jupyter:   python tests/test_notebooks.py --strip
Rewrite the executed copies after changing a notebook: python tests/test_notebooks.py --render   (~5 min on 2 cores)
"""

import glob
import json
import os
import sys
import time

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NOTEBOOK_DIR, "*.ipynb")))
EXPECTED = ["01_loss_math.ipynb", "02_one_graft_step.ipynb", "03_complementarity.ipynb", "04_outcome.ipynb"]
RENDERED = os.path.join(ROOT, "docs", "notebooks")  # the executed copies (render)
PLOTTING = {"01_loss_math.ipynb", "03_complementarity.ipynb", "04_outcome.ipynb"}  # their copies must show images
CELL_TIMEOUT = 1200  # seconds per cell: a guard against hangs, far above a cell's time on busy cores (issue 56)
KERNEL = "graft-min-test"


def strip(nb):
    """Remove outputs, execution counts and execution timing metadata, in place."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    return nb


def unstripped_cells(nb):
    return [i for i, c in enumerate(nb.cells)
            if (c.cell_type == "code" and (c.outputs or c.execution_count is not None)) or "execution" in c.metadata]


def write_kernelspec(folder):
    """A kernelspec named KERNEL under `folder` that starts ipykernel with sys.executable; returns the folder to put
    first on JUPYTER_PATH, so that the notebooks run with the same packages as this process."""
    spec = os.path.join(folder, "kernels", KERNEL)
    os.makedirs(spec, exist_ok=True)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "graft-min tests", "language": "python"}, f)
    return folder


@pytest.fixture(scope="session")
def kernel_of_this_interpreter(tmp_path_factory):
    """A kernelspec that starts ipykernel with sys.executable, found first via JUPYTER_PATH: the
    notebooks run with the same packages as the tests, whatever 'python3' kernels are installed."""
    folder = write_kernelspec(str(tmp_path_factory.mktemp("jupyter")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", folder + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
        yield KERNEL


def test_the_notebooks_are_all_there():
    assert [os.path.basename(p) for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = unstripped_cells(nb)
    assert not dirty, (f"{os.path.relpath(path, ROOT)}: cells {dirty} hold outputs or execution counts; "
                       f"strip them with: python tests/test_notebooks.py --strip")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_top_to_bottom(path, kernel_of_this_interpreter, tiny_pair_ready):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name=kernel_of_this_interpreter,
                            resources={"metadata": {"path": NOTEBOOK_DIR}})
    client.execute()  # raises CellExecutionError with the failing cell and its traceback


def execute(path, kernel_name=KERNEL):
    """The notebook at `path` executed top to bottom in a fresh kernel from notebooks/, as a notebook node."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name=kernel_name, resources={"metadata": {"path": NOTEBOOK_DIR}}
                   ).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timings: they would change the copy at every render
        if cell.cell_type == "code":  # progress bars (tqdm redraws a line with \r) say nothing to a reader
            cell.outputs = [o for o in cell.outputs if not (o.get("name") == "stderr" and o.get("text", "").startswith("\r"))]
    return nb


def images(nb):
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_the_executed_copy_is_current(path):
    """docs/notebooks/<name> holds the notebook's cells as they are now, each code cell executed (a count, and the
    plotting notebooks' figures): a notebook changed without `--render` fails here, naming the first changed cell."""
    name = os.path.basename(path)
    copy_path = os.path.join(RENDERED, name)
    fix = "rewrite the copies with: python tests/test_notebooks.py --render"
    assert os.path.exists(copy_path), f"docs/notebooks/{name} is missing; {fix}"
    nb, copy = nbformat.read(path, as_version=4), nbformat.read(copy_path, as_version=4)
    assert len(copy.cells) == len(nb.cells), f"docs/notebooks/{name}: {len(copy.cells)} cells, the notebook {len(nb.cells)}; {fix}"
    for i, (a, b) in enumerate(zip(nb.cells, copy.cells)):
        assert (a.cell_type, a.source) == (b.cell_type, b.source), f"docs/notebooks/{name}: cell {i} differs; {fix}"
        if a.cell_type == "code":
            assert b.execution_count is not None, f"docs/notebooks/{name}: cell {i} was not executed; {fix}"
    assert not any(o.get("output_type") == "error" for c in copy.cells if c.cell_type == "code" for o in c.outputs)
    assert (images(copy) > 0) == (name in PLOTTING), f"docs/notebooks/{name}: {images(copy)} images"


if __name__ == "__main__":
    if sys.argv[1:] not in (["--strip"], ["--render"]):
        sys.exit("usage: python tests/test_notebooks.py --strip    (clears every notebook's outputs in place)\n"
                 "       python tests/test_notebooks.py --render   (executes each notebook into docs/notebooks/)")
    if sys.argv[1:] == ["--render"]:
        import tempfile
        folder = write_kernelspec(tempfile.mkdtemp(prefix="jupyter-"))
        os.environ["JUPYTER_PATH"] = folder + os.pathsep + os.environ.get("JUPYTER_PATH", "")
        os.makedirs(RENDERED, exist_ok=True)
        for path in NOTEBOOKS:
            out = os.path.join(RENDERED, os.path.basename(path))
            t0 = time.time()
            nb = execute(path)
            seconds = time.time() - t0
            nbformat.write(nb, out + ".tmp")
            os.replace(out + ".tmp", out)
            print(f"wrote {os.path.relpath(out, ROOT)} ({images(nb)} images, {os.path.getsize(out) / 1e3:.0f} kB; "
                  f"executed in {seconds:.0f} s)")
        sys.exit(0)
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        if unstripped_cells(nb):
            nbformat.write(strip(nb), path)
            print(f"stripped {os.path.relpath(path, ROOT)}")
