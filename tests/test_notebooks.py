"""The teaching notebooks in notebooks/: each one runs top to bottom without an error (executed with
nbclient in a fresh kernel of this very interpreter, from notebooks/), and each is stored without
outputs so that git diffs stay readable.

The tiny pair is built (or found in the cache) once, up front, so that no notebook pays for it:
the kernels inherit this process's environment, so $GRAFT_MIN_CACHE applies to them too.

Strip outputs after running a notebook in Jupyter:   python tests/test_notebooks.py --strip
"""

import glob
import json
import os
import sys

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NOTEBOOK_DIR, "*.ipynb")))
EXPECTED = ["01_loss_math.ipynb", "02_one_graft_step.ipynb", "03_complementarity.ipynb"]
CELL_TIMEOUT = 240  # seconds per cell: a guard against hangs (03, the longest, takes about 2 minutes on 2 cores)
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


@pytest.fixture(scope="session")
def kernel_of_this_interpreter(tmp_path_factory):
    """A kernelspec that starts ipykernel with sys.executable, found first via JUPYTER_PATH: the
    notebooks run with the same packages as the tests, whatever 'python3' kernels are installed."""
    folder = tmp_path_factory.mktemp("jupyter")
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "graft-min tests", "language": "python"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(folder) + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
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


if __name__ == "__main__":
    if sys.argv[1:] != ["--strip"]:
        sys.exit("usage: python tests/test_notebooks.py --strip   (clears every notebook's outputs in place)")
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        if unstripped_cells(nb):
            nbformat.write(strip(nb), path)
            print(f"stripped {os.path.relpath(path, ROOT)}")
