"""Build the workbook as a static site (``make site``; README, "The workbook as a site").

Each language gets its own Sphinx tree: ``build/site/`` (English) and ``build/site/pt-BR/``. The pages are the
student editions (``teach/editions.py``) with every solution executed and folded away: an exercise cell shows
its starter code, and right after it the solution, executed, its code folded in a ``<details>`` (MyST-NB's
``hide-input`` tag). The instructor notes are left out, as in the student edition. The start page is each
tree's home; its hidden toctree lists the lessons in the syllabus order of ``teach/lessons.py``.

MathJax 3 (pinned below, its checksum checked) is fetched once with ``npm pack`` into ``build/mathjax-<version>/``
and served from each tree's ``_static/mathjax/``: the formulas of lessons 1.1, 3.1 and 5.3 render with no
request to another host (MathJax 3 ships its fonts; MathJax 4 would fetch them).

MyST-NB executes the pages through jupyter-cache (``build/site-cache/<lang>``, keyed by each notebook's code),
so a second build re-executes only the lessons whose code changed.

    python tools/site.py                  # every lesson, both languages (the release build)
    python tools/site.py --part           # the start page and lesson 1.1 in both languages (what CI builds)
    python tools/site.py --lessons 1.1 2.2 --out build/site
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from effitrain_helpers.teach import editions, lessons  # noqa: E402

LANGS = ("en", "pt-BR")
PART = ("1.1",)  # the representative part CI builds: lesson 1.1 has a figure and tables
START = "00_start_here.ipynb"
CONF = ROOT / "site"
MATHJAX_VERSION = "3.2.2"
MATHJAX_SHA256 = "1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09"  # of mathjax-3.2.2.tgz
# What the site serves of MathJax's es5/ folder: the TeX-to-HTML component, the TeX extensions it loads on
# demand, its fonts, and the menu's accessibility parts (loaded when a reader turns them on).
MATHJAX_PARTS = ("tex-chtml.js", "input/", "output/chtml/", "ui/", "a11y/", "sre/", "adaptors/")


def mathjax(folder: Path = ROOT / "build" / f"mathjax-{MATHJAX_VERSION}") -> Path:
    """The folder whose ``mathjax/`` holds MathJax's ``tex-chtml.js`` and what it loads (Sphinx copies it into
    ``_static/``). Fetched once with ``npm pack mathjax@<MATHJAX_VERSION>``; the tarball's SHA-256 is checked."""
    if (folder / "mathjax" / "tex-chtml.js").is_file():
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(f"npm not found: the site serves MathJax {MATHJAX_VERSION}, fetched once with "
                         f"`npm pack mathjax@{MATHJAX_VERSION}` into {folder}. Fix: install Node.js (it has npm), "
                         "or unpack that tarball's package/es5/ there as mathjax/ yourself.")
    with tempfile.TemporaryDirectory(prefix="effitrain-mathjax-") as tmp:
        subprocess.run([npm, "pack", f"mathjax@{MATHJAX_VERSION}", "--pack-destination", tmp, "--silent"],
                       check=True, timeout=600, stdout=subprocess.DEVNULL)
        tarball = Path(tmp) / f"mathjax-{MATHJAX_VERSION}.tgz"
        digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
        if digest != MATHJAX_SHA256:
            raise SystemExit(f"{tarball.name}: SHA-256 {digest}, expected {MATHJAX_SHA256}. Fix: nothing to "
                             "fix here; the registry served another file, do not build the site with it.")
        staging = Path(tmp) / "mathjax"
        with tarfile.open(tarball) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith("package/es5/")
                       and m.name.removeprefix("package/es5/").startswith(MATHJAX_PARTS)]
            for member in members:
                member.name = member.name.removeprefix("package/es5/")
            tar.extractall(staging, members=members, filter="data")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder / "mathjax", ignore_errors=True)
        shutil.move(staging, folder / "mathjax")
    return folder


def lesson_files(numbers: list[str] | None = None) -> list[str]:
    """The notebook names of the lessons ``numbers`` (all when None) that exist, in the syllabus order."""
    table = lessons.lesson_table()
    unknown = set(numbers or ()) - {lesson.number for lesson in table}
    if unknown:
        raise SystemExit(f"--lessons {' '.join(sorted(unknown))}: no such lesson; allowed: "
                         f"{', '.join(lesson.number for lesson in table)}. Fix: pass lesson numbers such as 1.1.")
    return [lesson.notebook for lesson in table
            if lesson.notebook and (numbers is None or lesson.number in numbers)]


def site_notebook(nb, name: str):
    """``nb`` (a solved notebook) as the site shows it: the student edition's cells, each exercise followed by
    its solution, executed and folded (``hide-input``); instructor notes dropped."""
    import nbformat

    marked = dict(editions.exercise_cells(nb, name))
    student = editions.make_edition(nb, name, "student", solutions=True)
    out = copy.deepcopy(nb)
    cells = [student.cells[0]]  # the student edition's banner
    blank_import = any(editions.BLANK_IMPORT in c.source for c in student.cells if c.cell_type == "code")
    for i, cell in enumerate(out.cells):
        if editions._is_instructor_only(cell):
            continue
        if i in marked:
            starter = editions._replace(cell.source, marked[i], keep_solution=False)
            if blank_import:  # the starter's ____ is defined, as in the student edition
                starter = starter.replace(editions.BLANK_IMPORT + "\n", "")
            cells.append(nbformat.v4.new_markdown_cell("```python\n" + starter + "\n```"))
            tags = cell.metadata.setdefault("tags", [])
            tags.append("hide-input")
        cells.append(cell)
    out.cells = cells
    out.metadata.pop("widgets", None)
    return out


def toctree(files: list[str], lang: str) -> str:
    """The hidden toctrees of the start page: one per chapter, its lessons in the syllabus order, then the
    execution table."""
    by_name = {lesson.notebook: lesson for lesson in lessons.lesson_table() if lesson.notebook}
    chapters: dict[int, list[str]] = {}
    for name in files:
        chapters.setdefault(by_name[name].chapter, []).append(Path(name).stem)
    blocks = [(f"{n}. {lessons.tr(lessons.CHAPTERS[n], lang=lang)}", stems) for n, stems in chapters.items()]
    blocks.append((lessons.tr(lessons.SITE_EXECUTION_TITLE, lang=lang), ["execution"]))
    return "\n\n".join(f"```{{toctree}}\n:hidden:\n:caption: {caption}\n\n" + "\n".join(stems) + "\n```"
                       for caption, stems in blocks)


def prepare(src: Path, files: list[str], lang: str) -> None:
    """Write the Sphinx source tree of language ``lang``: ``index.ipynb`` (the start page), the lessons and
    the execution table page. Files that did not change keep their time stamp (Sphinx rereads only those)."""
    import nbformat

    notebooks = editions.source_notebooks(None, lang)
    src.mkdir(parents=True, exist_ok=True)
    wanted = {"index.ipynb", "execution.md"} | set(files)
    for old in src.iterdir():
        if old.name not in wanted and old.suffix in (".ipynb", ".md"):
            old.unlink()
    pages = {name: site_notebook(notebooks[name], name) for name in files}
    home = site_notebook(notebooks[START], START)
    home.cells.append(nbformat.v4.new_markdown_cell(toctree(files, lang)))
    pages["index.ipynb"] = home
    for name, nb in pages.items():
        _write_if_changed(src / name, nbformat.writes(nb))
    heading = lessons.tr(lessons.SITE_EXECUTION_TITLE, lang=lang)
    _write_if_changed(src / "execution.md", f"# {heading}\n\n```{{nb-exec-table}}\n```\n")


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def build(out: Path, numbers: list[str] | None, langs=LANGS, jobs: str = "1") -> None:
    """Build the site of the lessons ``numbers`` (all when None) into ``out`` (English at its root, every
    other language in ``out/<lang>/``)."""
    files = lesson_files(numbers)
    work = ROOT / "build" / "site-src"
    for lang in langs:
        src = work / lang
        prepare(src, files, lang)
        html = out if lang == "en" else out / lang
        sphinx(src, html, lang, ROOT / "build" / "site-cache" / lang, work / f"{lang}.doctrees", jobs)
    (out / "site.json").write_text(json.dumps({"langs": list(langs), "lessons": files}, indent=2) + "\n")


def sphinx(src: Path, html: Path, lang: str, cache: Path, doctrees: Path, jobs: str = "1",
           mathjax_folder: Path | None = None) -> None:
    """Build the Sphinx tree ``src`` (language ``lang``) into ``html`` with the site's configuration, executing
    its notebooks through the jupyter-cache at ``cache`` (a notebook whose code is in it is not re-executed).
    ``mathjax_folder``: where ``mathjax/tex-chtml.js`` lies (default: :func:`mathjax`, fetched once)."""
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", jobs, "-c", str(CONF),
               "-D", f"language={lang.replace('-', '_')}", "-D", f"nb_execution_cache_path={cache}",
               str(src), str(html), "-d", str(doctrees)]
    env = {**os.environ, "EFFITRAIN_SITE_LANG": lang, "EFFITRAIN_SITE_MATHJAX": str(mathjax_folder or mathjax())}
    subprocess.run(command, check=True, cwd=src, env=env)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "site"), help="the site's folder (default build/site)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--part", action="store_true", help="only the start page and lesson 1.1 (what CI builds)")
    which.add_argument("--lessons", nargs="+", metavar="N.N", help="only these lessons (and the start page)")
    args = parser.parse_args(argv)
    numbers = list(PART) if args.part else args.lessons
    out = Path(args.out).resolve()  # Sphinx runs in the source tree: a relative --out would land there
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {str(out)!r} is a file, not a folder. Fix: pass a folder path.")
    build(out, numbers)
    print(f"site built: {out / 'index.html'}")


if __name__ == "__main__":
    main()
