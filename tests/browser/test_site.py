"""The workbook as a site (issue 31): the representative part the exhaustive tier builds
(``tools/site.py --part``: the start page and lesson 1.1, a lesson with a figure and tables, in English and
pt-BR), opened in Chromium from a local HTTP server: figure, table and formulas (MathJax from the site's own _static/) in each language, the folded
solution, the language switch, the execution table, the search. Every request that leaves the server is
refused and recorded; no page may log a console error."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading

import pytest
from lab_page import REPO

SITE = REPO / "build" / "site-test"
LESSON = "1_1_prepare_models.html"


@pytest.fixture(scope="module")
def site_url():
    """The representative part, built (jupyter-cache reused between runs) and served on 127.0.0.1."""
    subprocess.run([sys.executable, "tools/site.py", "--part", "--out", str(SITE)], cwd=REPO, check=True,
                   timeout=1800)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def site_page(browser, site_url):
    """A page that refuses every request to another host; ``.outside`` and ``.errors`` list what it saw."""
    context = browser.new_context()
    page = context.new_page()
    page.outside, page.errors = [], []

    def route(r):
        if r.request.url.startswith(site_url):
            r.continue_()
        else:
            page.outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    context.close()


def _assert_figure_table_and_math(page) -> None:
    assert page.locator("div.cell_output img").count() >= 1, "the lesson shows no figure"
    assert page.locator("div.cell_output table").count() >= 1, "the lesson shows no table"
    # MathJax (served from _static/mathjax/) turned the lesson's $n^3$ into rendered math, not TeX source
    page.locator("mjx-container").first.wait_for(timeout=30_000)
    assert "mathjax/tex-chtml.js" in page.locator("script[src*=mathjax]").first.get_attribute("src")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.exhaustive  # builds two lessons twice: about 3 min on 2 cores (README, The workbook as a site)
def test_site_pages_switch_and_search_stay_on_the_machine(site_page, site_url):
    page = site_page
    page.goto(f"{site_url}/index.html")
    nav = page.locator("nav.bd-links")
    assert nav.get_by_role("link", name="1.1", exact=False).count() >= 1, nav.inner_text()

    page.goto(f"{site_url}/{LESSON}")
    _assert_figure_table_and_math(page)
    assert page.locator("details").count() >= 1, "no solution folded away in <details>"
    assert "Executed on" in page.locator(".effitrain-executed").inner_text()
    assert page.locator("div.highlight .effitrain-copy").count() >= 1, "no copy button on the code cells"

    page.locator("a.effitrain-lang-switch").click()
    page.wait_for_load_state()
    assert page.url == f"{site_url}/pt-BR/{LESSON}", page.url
    assert page.locator("html").get_attribute("lang").startswith("pt")
    _assert_figure_table_and_math(page)
    assert "Executado em" in page.locator(".effitrain-executed").inner_text()
    page.locator("a.effitrain-lang-switch").click()
    page.wait_for_load_state()
    assert page.url == f"{site_url}/{LESSON}", page.url

    page.goto(f"{site_url}/execution.html")
    assert "1_1_prepare_models" in page.locator("table").first.inner_text(), "no execution table row for 1.1"

    page.goto(f"{site_url}/search.html?q=Accelerator")
    results = page.locator("#search-results li")
    results.first.wait_for(timeout=30_000)
    assert LESSON in page.locator("#search-results").inner_html()

    assert not page.outside, f"requests left the machine: {page.outside}"
    assert not page.errors, f"console errors: {page.errors}"
