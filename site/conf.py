"""Sphinx configuration of the workbook's site (built by ``tools/site.py``; README, "The workbook as a site").

One tree per language: ``EFFITRAIN_SITE_LANG`` (set by tools/site.py) says which; English is built at the
site's root, pt-BR in ``pt-BR/``. Every page is a notebook executed by MyST-NB through jupyter-cache. Nothing is
loaded from another host: the theme bundles its fonts and icons, the copy buttons are ``_static/site.js``, and
no lesson has math, so MathJax is left out (``nb_render_markdown_format`` below keeps ``$`` literal).
"""

import os
import platform
import time

import psutil


LANG = os.environ.get("EFFITRAIN_SITE_LANG", "en")
project = "effitrain"
author = "effitrain"
root_doc = "index"
extensions = ["myst_nb"]
exclude_patterns = ["_build", "*.doctrees"]
templates_path = [os.path.join(os.path.dirname(__file__), "_templates")]
html_static_path = [os.path.join(os.path.dirname(__file__), "_static")]
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

# No lesson writes math; a `$` in a lesson is an amount, not TeX. MathJax would come from a CDN: not loaded.
myst_enable_extensions = []
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
HARDWARE = {"machine": platform.machine(), "cores": psutil.cpu_count(), "system": platform.system(),
            "ram": psutil.virtual_memory().total / 2**30}
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
