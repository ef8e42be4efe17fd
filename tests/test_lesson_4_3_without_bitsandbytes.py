"""Lesson 4.3 on a platform where bitsandbytes cannot be imported: it says so and still runs to the end."""

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_lesson_4_3_runs_without_bitsandbytes(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "notebooks" / "4_3_8bit_adam.ipynb", as_version=4)
    # as if bitsandbytes were not installed: `import bitsandbytes` raises ImportError in this kernel
    nb.cells.insert(0, nbformat.v4.new_code_cell('import sys\nsys.modules["bitsandbytes"] = None'))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)
    assert "bitsandbytes cannot be imported" in text
    assert "skipped: bitsandbytes is not available here" in text
    assert "adamw8bit" not in [line.split()[0] for line in text.splitlines() if line.startswith(("adamw", "adafactor"))]
    assert "All self-checks passed" in text
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs if out.output_type == "error"]
    assert errors == []
