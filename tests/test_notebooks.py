"""Execute every notebook under notebooks/ so that its claims are checked on every run."""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: pathlib.Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    # One intra-op thread: the notebooks' models are small, and beside the other test worker
    # torch's default (a thread per core) oversubscribes the CPU (meta_optimizer: 60 s -> 11 s
    # on 2 cores under ``-n 2``).
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute(
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    errors = [o for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
