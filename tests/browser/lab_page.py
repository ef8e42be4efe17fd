"""Driving JupyterLab in a Playwright page the way a learner does, read back the way a learner reads it.

JupyterLab runs with ``expose_app_in_browser``, so the page has ``window.jupyterapp`` (as JupyterLab's own
Galata tests use it): commands are run through ``jupyterapp.commands.execute`` (the same commands the menus
run), text is typed into cells with the keyboard, and what the learner sees is read from the page: rendered
output text, computed styles, loaded images.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from effitrain_helpers.teach.editions import default_source

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("EFFITRAIN_BROWSER_ARTIFACTS", REPO / "build" / "browser-test-failures"))

# JavaScript run in the page: `panel` is the notebook in the main area.
_PANEL = "const panel = window.jupyterapp.shell.currentWidget;"

# Every cell of the current notebook as the model holds it (what the kernel sent) plus the rendered text.
_CELLS = _PANEL + """
return panel.content.widgets.map((cell, index) => ({
  index,
  type: cell.model.type,
  source: cell.model.sharedModel.getSource(),
  executionCount: cell.model.type === 'code' ? cell.model.executionCount : null,
  outputs: cell.model.type === 'code' ? cell.model.outputs.toJSON() : [],
  text: (cell.node.querySelector('.jp-OutputArea') || {innerText: ''}).innerText,
}));
"""

KERNEL_START_SECONDS = 180


class LabPage:
    """One Playwright page showing JupyterLab (``lab`` is the conftest's server)."""

    def __init__(self, page, lab):
        """Use :meth:`new` (a fresh browser context and JupyterLab workspace per page)."""
        self.page, self.lab = page, lab
        self.workspace = f"test-{secrets.token_hex(4)}"  # nothing restored from another page's tabs
        self.console: list[str] = []
        page.on("console", lambda msg: self.console.append(f"[{msg.type}] {msg.text}"))
        page.on("pageerror", lambda err: self.console.append(f"[pageerror] {err}"))

    @classmethod
    def new(cls, browser, lab) -> LabPage:
        """A page in a new browser context (no state shared with other pages); ``close()`` when done."""
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(60_000)
        return cls(context.new_page(), lab)

    def close(self) -> None:
        """Shut down the notebook's kernel (a learner closing the lesson) and close the page."""
        try:
            self.page.evaluate("() => window.jupyterapp?.shell.currentWidget?.sessionContext?.shutdown()")
        finally:
            self.page.context.close()

    # --- opening and running ---------------------------------------------------------------------------
    def open_notebook(self, path: str) -> None:
        """Open ``path`` (relative to the server's root) and wait until its kernel is idle."""
        self.page.goto(self.lab.url(path, self.workspace), timeout=KERNEL_START_SECONDS * 1000)
        self.page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext", timeout=KERNEL_START_SECONDS * 1000)
        self.wait_for_idle(KERNEL_START_SECONDS)

    def wait_for_idle(self, seconds: float) -> None:
        """Until the notebook's kernel is started and idle, and no cell waits to run ([*])."""
        self.page.wait_for_function(
            "() => { " + _PANEL + " const kernel = panel.sessionContext.session?.kernel;"
            " return kernel && kernel.status === 'idle' && !panel.sessionContext.pendingInput"
            " && [...panel.content.node.querySelectorAll('.jp-InputPrompt')]"
            ".every(p => !p.textContent.includes('[*]')); }",
            timeout=seconds * 1000, polling=500)

    def run_all(self, seconds: float) -> list[dict]:
        """Run > Run All Cells; returns the cells (see ``cells``) once every cell ran or one failed."""
        ok = self.page.evaluate(
            """async (ms) => {
              const run = window.jupyterapp.commands.execute('notebook:run-all-cells');
              const late = new Promise((_, fail) => setTimeout(() => fail(new Error(
                `Run All did not finish within ${ms / 1000} s`)), ms));
              return await Promise.race([run, late]);
            }""", seconds * 1000)
        self.wait_for_idle(60)
        cells = self.cells()
        errors = [c for c in cells if any(o["output_type"] == "error" for o in c["outputs"])]
        assert ok and not errors, f"Run All stopped with an error: {_describe(errors or cells[-1:])}"
        return cells

    def cells(self) -> list[dict]:
        """index, type, source, executionCount, outputs (nbformat JSON) and the rendered output text of every
        cell of the open notebook."""
        return self.page.evaluate("() => { " + _CELLS + " }")

    def cell_locator(self, index: int):
        return self.page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").nth(index)

    def type_into_cell(self, index: int, code: str) -> None:
        """Select cell ``index``, replace its text by typing ``code`` (keyboard), run it (Shift+Enter) and
        wait until it has run (a new execution count, the kernel idle)."""
        before = self.page.evaluate("(i) => { " + _PANEL + " panel.content.activeCellIndex = i;"
                                    " panel.content.mode = 'command';"
                                    " return panel.content.widgets[i].model.executionCount; }", index)
        editor = self.cell_locator(index).locator(".jp-InputArea-editor .cm-content")
        editor.click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.press("Delete")
        self.page.keyboard.insert_text(code)
        self.page.keyboard.press("Shift+Enter")
        self.page.wait_for_function(
            "([i, before]) => { " + _PANEL + " const count = panel.content.widgets[i].model.executionCount;"
            " return count !== null && count !== before; }", arg=[index, before], timeout=120_000, polling=250)
        self.wait_for_idle(120)

    def add_cell_below(self, index: int, code: str) -> int:
        """A new code cell after cell ``index`` holding ``code``, run; returns its index."""
        self.page.evaluate("(i) => { " + _PANEL + " panel.content.activeCellIndex = i;"
                           " panel.content.mode = 'command';"
                           " return window.jupyterapp.commands.execute('notebook:insert-cell-below'); }", index)
        self.type_into_cell(index + 1, code)
        return index + 1

    def output_text(self, index: int) -> str:
        return self.cells()[index]["text"]

    # --- what the learner sees ------------------------------------------------------------------------
    def news_notifications(self) -> list[str]:
        """Texts of JupyterLab notifications about news or updates (toasts and the notification centre)."""
        return self.page.evaluate(
            """() => [...document.querySelectorAll('.Toastify__toast, .jp-Notification-List li')]
                   .map(n => n.innerText).filter(t => /news|update/i.test(t))""")

    def broken_images(self) -> list[str]:
        """Output images not loaded (not complete, or no pixels): their cell index and source's start."""
        return self.page.evaluate(
            """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output img')]
                   .filter(img => !(img.complete && img.naturalWidth > 0))
                   .map(img => (img.getAttribute('src') || '').slice(0, 40))""")

    def image_count(self) -> int:
        return self.page.locator(".jp-NotebookPanel .jp-OutputArea-output img").count()

    def table_cells_not_left(self) -> list[dict]:
        """Body cells (td) of every table in the rendered output and Markdown of the open notebook whose
        computed text-align is not left: cell index, table's first words, the cell's text and alignment.

        pandas DataFrames (``table.dataframe``) are left out: JupyterLab right-aligns their columns of numbers
        on purpose. Every other HTML table (a code view, a hand-made table) and every Markdown table counts:
        code or prose right-aligned is what the 2.2 code view looked like."""
        return self.page.evaluate(
            """() => {
              const panel = window.jupyterapp.shell.currentWidget;
              const found = [];
              panel.content.widgets.forEach((cell, index) => {
                cell.node.querySelectorAll('.jp-RenderedHTMLCommon table:not(.dataframe)').forEach(table => {
                  table.querySelectorAll('td').forEach(td => {
                    const align = getComputedStyle(td).textAlign;
                    if (!['left', 'start', '-webkit-left'].includes(align) && td.innerText.trim()) {
                      found.push({cell: index, table: table.innerText.slice(0, 40), text:
                                  td.innerText.trim().slice(0, 60), align});
                    }
                  });
                });
              });
              return found;
            }""")

    def table_count(self) -> int:
        return self.page.locator(".jp-NotebookPanel .jp-RenderedHTMLCommon table").count()

    # --- failure report -------------------------------------------------------------------------------
    def save_failure(self, name: str) -> str:
        """Save a screenshot and the console log as ``ARTIFACTS/name.*``; return where they are."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        stem = ARTIFACTS / "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
        shot, log = stem.with_suffix(".png"), stem.with_suffix(".console.log")
        from playwright.sync_api import Error

        try:
            self.page.screenshot(path=str(shot), timeout=30_000)
        except Error as err:  # the page may be gone; the log is still worth saving
            shot = f"none ({type(err).__name__}: {err})"
        log.write_text("\n".join(self.console) + "\n")
        return f"screenshot: {shot}\nconsole log: {log}"

def _describe(cells: list[dict]) -> str:
    """The failing cells' index, first source line and error, for an assertion message."""
    parts = []
    for cell in cells:
        errors = [f"{o['ename']}: {o['evalue']}" for o in cell["outputs"] if o["output_type"] == "error"]
        first = cell["source"].splitlines()[0] if cell["source"] else ""
        parts.append(f"cell {cell['index']} ({first!r}): {'; '.join(errors) or cell['text'][-300:]}")
    return " | ".join(parts)


# --- shared by the scenarios ---------------------------------------------------------------------------
NOTEBOOKS = default_source()
RUN_ALL_SECONDS = 600  # generous: a busy 2-core machine runs lesson 2.2 several times slower than a quiet one


def copy_notebooks(lab, folder: str, names: list[str], source=NOTEBOOKS) -> str:
    """Copy ``names`` (and the edition file, if any) from ``source`` into ``folder`` of the server's root."""
    target = lab.root / folder
    target.mkdir()
    for name in names + [n.name for n in source.glob("effitrain-edition.json")]:
        shutil.copy(source / name, target / name)
    return folder


def stream(cells: list[dict], name: str) -> list[tuple[int, str]]:
    """(cell index, text) of every ``name`` stream output (stdout or stderr)."""
    return [(c["index"], o["text"]) for c in cells for o in c["outputs"]
            if o["output_type"] == "stream" and o["name"] == name]


def assert_tables_left_aligned(page, notebook: str) -> None:
    """Scenario 4 on the page shown: every body cell of every rendered table is left-aligned."""
    assert page.table_count() > 0, f"{notebook}: no table rendered"
    wrong = page.table_cells_not_left()
    assert not wrong, (f"{notebook}: {len(wrong)} table body cells not left-aligned, in cells "
                       f"{sorted({w['cell'] for w in wrong})}; e.g. {wrong[:2]}")


def assert_no_news(page) -> None:
    assert not page.news_notifications(), (
        "JupyterLab shows a news/update notification; `make env` installs tools/jupyterlab-overrides.json "
        "to turn them off")


def run_in_page(lab, browser, path: str):
    """Open ``path`` in a new page and Run All; yields (page, cells) for a module's tests, then closes it.
    On failure the screenshot and console log are saved and named in the error."""
    page = LabPage.new(browser, lab)
    try:
        page.open_notebook(path)
        cells = page.run_all(RUN_ALL_SECONDS)
    except Exception as err:
        raise AssertionError(f"{err}\n{page.save_failure(path.replace('/', '_'))}") from err
    yield page, cells
    page.close()
