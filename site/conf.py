"""Sphinx configuration of the workbook's site (built by ``tools/site.py``; README, "The workbook as a site").

One tree per language: ``EFFITRAIN_SITE_LANG`` (set by tools/site.py) says which; English is built at the
site's root, pt-BR in ``pt-BR/``. Every page is a notebook executed by MyST-NB through jupyter-cache. Nothing is
loaded from another host: the theme bundles its fonts and icons, the copy buttons are ``_static/site.js``, and
the formulas (``$...$`` and ``$$...$$`` in lessons 1.1, 3.1, 5.3) are rendered by the MathJax 3 that
tools/site.py fetched (``EFFITRAIN_SITE_MATHJAX``, copied into ``_static/mathjax/``).
"""

import os
import platform
import time

LANG = os.environ.get("EFFITRAIN_SITE_LANG", "en")
MATHJAX = os.environ.get("EFFITRAIN_SITE_MATHJAX")
if not MATHJAX or not os.path.isfile(os.path.join(MATHJAX, "mathjax", "tex-chtml.js")):
    raise SystemExit(f"EFFITRAIN_SITE_MATHJAX={MATHJAX!r}: not a folder holding mathjax/tex-chtml.js. "
                     "Fix: build the site with `python tools/site.py` (it fetches MathJax and sets it).")
project = "effitrain"
author = "effitrain"
root_doc = "index"
extensions = ["myst_nb"]
exclude_patterns = ["_build", "*.doctrees"]
templates_path = [os.path.join(os.path.dirname(__file__), "_templates")]
html_static_path = [os.path.join(os.path.dirname(__file__), "_static"), MATHJAX]
mathjax_path = "mathjax/tex-chtml.js"  # relative: served from this site's _static/, not from a CDN
html_js_files = ["site.js"]
html_css_files = ["site.css"]
html_theme = "sphinx_book_theme"
html_title = "effitrain"
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "article_header_end": ["lang-switch.html", "article-header-buttons.html"],
    "footer_content_items": ["executed-on.html"],
}

# Lessons write TeX between dollars ($n^3$ inline, $$...$$ as a display); no lesson writes `$` for money.
myst_enable_extensions = ["dollarmath"]
myst_dmath_double_inline = False
suppress_warnings = ["mystnb.unknown_mime_type"]

nb_execution_mode = "cache"
nb_execution_timeout = 1800
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
nb_ipywidgets_js = {}  # a widget shows its saved text; its JavaScript would come from a CDN

# What each page's footer says about where and when it was executed (the lesson's own time is in the
# execution table, `execution.html`).
def _hardware() -> dict:
    """The machine the pages are executed on: its CPU by name and instruction set (bf16 is fast on AMX, slow on
    AVX2), its GPUs if any, cores, memory and system."""
    from effitrain_helpers.core.devices import hardware_summary

    summary = hardware_summary()
    machine = ", ".join([f"{summary.cpu_model} ({summary.cpu_isa})"] + [gpu.name for gpu in summary.gpus])
    return {"machine": machine, "cores": summary.logical_cores, "system": platform.system(),
            "ram": summary.memory_total_gib}


HARDWARE = _hardware()
html_context = {
    "effitrain_lang": LANG,
    "effitrain_other": "pt-BR" if LANG == "en" else "en",
    "default_mode": "light",  # pydata-sphinx-theme reads it here; empty, every page logs a console error
}


def _executed_on(app, pagename, templatename, context, doctree):
    """``context["effitrain_executed"]``: one line saying on which hardware, when and in how long this page
    was executed (from MyST-NB's execution record: the cache's when the page was not re-executed)."""
    from myst_nb.sphinx_ import NbMetadataCollector

    from effitrain_helpers.core.language import tr
    from effitrain_helpers.teach.lessons import SITE_EXECUTED_ON

    data = NbMetadataCollector.get_exec_data(app.env, pagename) if pagename in app.env.all_docs else None
    if not data:
        return
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(data["mtime"]))
    context["effitrain_executed"] = tr(SITE_EXECUTED_ON, lang=LANG, when=when, seconds=data["runtime"] or 0.0,
                                       **HARDWARE)


def setup(app):
    app.connect("html-page-context", _executed_on)
