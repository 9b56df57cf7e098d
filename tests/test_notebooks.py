"""The notebooks in docs/notebooks run end to end, and are committed without outputs.

They are executed with nbclient in a fresh Python kernel (the ``test`` extra installs nbclient,
nbformat and ipykernel), from the repository root, as a student would run them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need the test extra (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need the test extra (nbclient)")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "docs" / "notebooks").glob("*.ipynb"))


def test_there_are_three_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["1-tour.ipynb", "2-write-a-policy.ipynb", "3-train-an-agent.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip the outputs"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_end_to_end(path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError naming the cell on any failure
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_copied_out_of_the_repository_refuses_at_its_first_cell(path, tmp_path):
    # A student who downloads one notebook gets told, before anything runs, what it needs.
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    nb = nbformat.read(copy, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells = nb.cells[: first + 1]
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with pytest.raises(nbclient.exceptions.CellExecutionError) as raised:
        client.execute()
    message = str(raised.value)
    assert "RuntimeError" in message and "dallygym repository" in message
    assert "pip install -e" in message and "jupyter lab docs/notebooks/" in message
    assert "FileNotFoundError" not in message
