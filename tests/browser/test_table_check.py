"""Scenario 4's own control: the left-alignment check sees a right-aligned table, as the old 2.2 code view was
(a hand-made HTML table of source lines, which JupyterLab right-aligns), and passes a Markdown table."""

from __future__ import annotations

import nbformat
from lab_page import RUN_ALL_SECONDS


def test_the_alignment_check_finds_a_right_aligned_code_table(page, lab):
    folder = lab.root / "control"
    folder.mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("| step | what |\n|---|---|\n| 1 | replicate the model |"),
        nbformat.v4.new_code_cell('from IPython.display import HTML\n'
                                  'HTML("<table><tr><td>def step(batch):</td><td>    loss = model(batch)</td></tr>'
                                  '</table>")'),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, folder / "control.ipynb")
    page.open_notebook("control/control.ipynb")
    page.run_all(RUN_ALL_SECONDS)
    wrong = page.table_cells_not_left()
    assert [w["text"] for w in wrong] == ["def step(batch):", "loss = model(batch)"], wrong
    assert {w["cell"] for w in wrong} == {1}, "the Markdown table (cell 0) is left-aligned"
