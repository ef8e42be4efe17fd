"""The workbook as a site (issue 31; ``tools/site.py``, ``site/conf.py``): its configuration serves MathJax from
the site itself, the language switch links a page to its translation, the pages fold the solutions and leave
the instructor notes out, MathJax's tarball is checked; and (slow) a changed page is the only one re-executed.
The browser test of the built part is ``tests/browser/test_site.py``."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import runpy
import tarfile
from pathlib import Path

import jinja2
import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("effitrain_site_tool", REPO / "tools" / "site.py")
site_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site_tool)


def _fake_mathjax(folder: Path) -> Path:
    (folder / "mathjax").mkdir(parents=True)
    (folder / "mathjax" / "tex-chtml.js").write_text("// MathJax stand-in\n")
    return folder


def _conf(monkeypatch, tmp_path, lang="en") -> dict:
    monkeypatch.setenv("EFFITRAIN_SITE_LANG", lang)
    monkeypatch.setenv("EFFITRAIN_SITE_MATHJAX", str(_fake_mathjax(tmp_path / "mj")))
    return runpy.run_path(str(REPO / "site" / "conf.py"))


def test_mathjax_is_served_by_the_site_and_dollar_math_is_on(monkeypatch, tmp_path):
    conf = _conf(monkeypatch, tmp_path)
    path = conf["mathjax_path"]
    assert "://" not in path and not path.startswith("/"), f"mathjax_path {path!r} is not relative to _static"
    served = [Path(folder) / path for folder in conf["html_static_path"] if (Path(folder) / path).is_file()]
    assert served, f"no html_static_path folder holds {path}: {conf['html_static_path']}"
    assert "dollarmath" in conf["myst_enable_extensions"]
    assert conf["nb_execution_mode"] == "cache"
    assert conf["nb_ipywidgets_js"] == {}, "widget JavaScript would be loaded from a CDN"


def test_each_page_says_on_which_hardware_it_was_executed(monkeypatch, tmp_path):
    from effitrain_helpers.core.devices import cpu_model_name

    conf = _conf(monkeypatch, tmp_path)
    assert "executed-on.html" in conf["html_theme_options"]["footer_content_items"]
    assert conf["HARDWARE"]["machine"].startswith(cpu_model_name() + " (SIMD "), conf["HARDWARE"]


def test_conf_without_mathjax_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("EFFITRAIN_SITE_MATHJAX", str(tmp_path / "nothing"))
    with pytest.raises(SystemExit, match=r"EFFITRAIN_SITE_MATHJAX=.*nothing.*Fix: build the site with"):
        runpy.run_path(str(REPO / "site" / "conf.py"))


@pytest.mark.parametrize("lang, href, label, other", [
    ("en", "pt-BR/1_1_prepare_models.html", "Português", "pt-BR"),
    ("pt-BR", "../1_1_prepare_models.html", "English", "en"),
])
def test_language_switch_links_the_page_to_its_translation(monkeypatch, tmp_path, lang, href, label, other):
    conf = _conf(monkeypatch, tmp_path, lang)
    assert "lang-switch.html" in conf["html_theme_options"]["article_header_end"]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(conf["templates_path"]))
    html = env.get_template("lang-switch.html").render(pagename="1_1_prepare_models", **conf["html_context"])
    assert f'href="{href}"' in html and f'hreflang="{other}"' in html and label in html, html


def _tarball(tmp: Path, files: dict[str, str]) -> Path:
    path = tmp / f"mathjax-{site_tool.MATHJAX_VERSION}.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def _npm_pack_gives(monkeypatch, tmp_path, files: dict[str, str], digest: str | None = None):
    """``npm pack`` (not started) leaves a tarball of ``files``; the pinned checksum is its own unless given."""
    made = _tarball(tmp_path, files)
    monkeypatch.setattr(site_tool.shutil, "which", lambda name: "/usr/bin/npm")
    monkeypatch.setattr(site_tool, "MATHJAX_SHA256", digest or hashlib.sha256(made.read_bytes()).hexdigest())

    def npm(command, **kwargs):
        site_tool.shutil.copy(made, Path(command[command.index("--pack-destination") + 1]) / made.name)
    monkeypatch.setattr(site_tool.subprocess, "run", npm)


def test_mathjax_keeps_what_the_site_serves(monkeypatch, tmp_path):
    _npm_pack_gives(monkeypatch, tmp_path, {"package/es5/tex-chtml.js": "js", "package/es5/tex-svg.js": "svg",
                                  "package/es5/output/chtml/fonts/woff-v2/a.woff": "font",
                                  "package/es5/output/svg/x.js": "svg", "package/ts/tex-chtml.js": "ts"})
    folder = site_tool.mathjax(tmp_path / "mj")
    kept = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert kept == ["mathjax/output/chtml/fonts/woff-v2/a.woff", "mathjax/tex-chtml.js"], kept
    monkeypatch.setattr(site_tool.subprocess, "run", lambda *a, **k: pytest.fail("fetched twice"))
    assert site_tool.mathjax(tmp_path / "mj") == folder


def test_mathjax_with_another_checksum_is_refused(monkeypatch, tmp_path):
    _npm_pack_gives(monkeypatch, tmp_path, {"package/es5/tex-chtml.js": "tampered"}, digest="0" * 64)
    with pytest.raises(SystemExit, match=r"mathjax-3\.2\.2\.tgz: SHA-256 [0-9a-f]{64}, expected 0{64}"):
        site_tool.mathjax(tmp_path / "mj")
    assert not (tmp_path / "mj" / "mathjax").exists()


def test_mathjax_without_npm_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(site_tool.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match=r"npm not found.*Fix: install Node\.js"):
        site_tool.mathjax(tmp_path / "mj")


def test_unknown_lesson_is_refused_in_one_line():
    with pytest.raises(SystemExit, match=r"--lessons 9\.9: no such lesson; allowed: 1\.1, .*Fix: pass"):
        site_tool.lesson_files(["1.1", "9.9"])


def test_a_page_folds_each_solution_and_leaves_the_instructor_notes_out():
    name = "1_1_prepare_models.ipynb"
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    page = site_tool.site_notebook(nb, name)
    solutions = [i for i, c in enumerate(page.cells) if "hide-input" in c.metadata.get("tags", [])]
    assert len(solutions) == len(site_tool.editions.exercise_cells(nb, name)) >= 1
    for i in solutions:
        starter = page.cells[i - 1]
        assert starter.cell_type == "markdown" and "____" in starter.source, starter.source
    instructor = [c for c in nb.cells if site_tool.editions._is_instructor_only(c)]
    assert instructor, "lesson 1.1 has no instructor note to leave out"
    assert not any(c.source == n.source for c in page.cells for n in instructor)


def test_the_start_page_lists_the_chapters_in_syllabus_order():
    files = site_tool.lesson_files(None)
    tree = site_tool.toctree(files, "en")
    stems = [line for line in tree.splitlines() if line and not line.startswith((":", "`"))]
    assert stems == [Path(f).stem for f in files] + ["execution"], stems
    assert tree.index(":caption: 1.") < tree.index(":caption: 2.") < tree.index(":caption: 6.")


@pytest.mark.slow
@pytest.mark.exhaustive  # needs the [site] extra (make test-all installs it, CI's make test does not); 88 s busy
def test_a_changed_page_is_the_only_one_re_executed(tmp_path):
    src, html = tmp_path / "src", tmp_path / "html"
    src.mkdir()
    (src / "index.md").write_text("# Index\n\n```{toctree}\nkept\nchanged\n```\n")
    cell = "import time\nprint('executed at', time.time_ns())"
    for stem in ("kept", "changed"):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {stem}"),
                                             nbformat.v4.new_code_cell(cell)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, src / f"{stem}.ipynb")

    mathjax = _fake_mathjax(tmp_path / "mj")

    def build() -> dict[str, str]:
        site_tool.sphinx(src, html, "en", tmp_path / "cache", tmp_path / "doctrees", mathjax_folder=mathjax)
        return {stem: (html / f"{stem}.html").read_text().split("executed at ")[1].split("<")[0].strip()
                for stem in ("kept", "changed")}

    first = build()
    changed = nbformat.read(src / "changed.ipynb", as_version=4)
    changed.cells[1].source = cell + "  # edited"
    nbformat.write(changed, src / "changed.ipynb")
    second = build()
    assert second["kept"] == first["kept"], "the unchanged page was re-executed"
    assert second["changed"] != first["changed"], "the changed page was not re-executed"
