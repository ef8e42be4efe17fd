"""Browser tests: the workbook in JupyterLab, in headless Chromium driven by Playwright, as a learner sees it.

Scenarios (issue 14), each on its own copy of the notebooks: 1. the start page (``test_start_page.py``);
2. lesson 1.1's student edition (``test_lesson_1_1.py``); 3. lesson 2.2 in several processes
(``test_lesson_2_2.py``); 4. every table those pages render, body cells left-aligned (in each of them).
None may show JupyterLab's news or update pop-up.

Fixtures:

- ``chromium``: the path of Debian's ``chromium`` (or ``EFFITRAIN_CHROMIUM``). Missing: every browser test is
  skipped with one line saying how to enable them; under CI (``CI=true``) a missing browser is a failure.
- ``lab``: a JupyterLab server of this environment, started on 127.0.0.1 (a free port, a token, a temporary
  root folder, its own Jupyter config/data/runtime/settings folders), stopped at the end with its kernels.
- ``page``: a fresh Chromium page (one browser per session). When a test fails, its screenshot and the
  page's console log are saved under ``build/browser-test-failures/`` (or ``EFFITRAIN_BROWSER_ARTIFACTS``)
  and the failure report names both files.

Chromium is never downloaded (no ``playwright install``): Playwright for Python drives the system's browser
through ``executable_path``. The browser tests are marked ``browser`` and ``slow``; ``make test-browser`` runs
them alone.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from lab_page import REPO, LabPage  # tests/browser/ is on sys.path (pytest's rootdir-relative import)

ENABLE = ("install Chromium to run them (Debian/Ubuntu: `sudo apt-get install chromium`; "
          "elsewhere set EFFITRAIN_CHROMIUM=/path/to/chromium)")
# Headless, and quiet on the network: without the networking flags Chromium keeps trying to reach Google's
# services, which floods a closed network with connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_SECONDS = 120


_SKIPPED: list[str] = []  # the one line said at the end of the run when the browser tests were left out


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _chromium() -> tuple[str | None, str | None]:
    """(Chromium's path, None), or (None, what is missing)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None, "Playwright for Python is not installed (`make env`, or `pip install -e '.[test]'`)"
    path = os.environ.get("EFFITRAIN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not (path and os.access(path, os.X_OK)):
        return None, f"no Chromium found (EFFITRAIN_CHROMIUM={os.environ.get('EFFITRAIN_CHROMIUM')!r}, none on PATH)"
    return path, None


def pytest_collection_modifyitems(config, items):
    """Every test in this folder is a browser test, and slow. Without a browser (and not under CI) they are
    left out, and one line at the end of the run says how to enable them."""
    here = Path(__file__).parent
    mine = [item for item in items if here in Path(item.fspath).parents]
    for item in mine:
        item.add_marker(pytest.mark.browser)
        item.add_marker(pytest.mark.slow)
    _, problem = _chromium()
    if mine and problem and not _under_ci():
        items[:] = [item for item in items if item not in mine]
        config.hook.pytest_deselected(items=mine)
        _SKIPPED.append(f"{len(mine)} browser tests skipped: {problem}; {ENABLE}")


def pytest_terminal_summary(terminalreporter):
    for line in _SKIPPED:
        terminalreporter.write_line(line, yellow=True)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Chromium's path. Missing, the tests never get here except under CI, where that is a failure."""
    path, problem = _chromium()
    if problem:
        pytest.fail(f"browser tests cannot run under CI: {problem}; .ci/run installs Chromium with apt-get")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lab:
    """A running JupyterLab server: ``url(path)`` opens a file in the root folder ``root``."""

    def __init__(self, root: Path, port: int, token: str, process: subprocess.Popen, log: Path):
        self.root, self.port, self.token, self.process, self.log = root, port, token, process, log

    def url(self, path: str, workspace: str) -> str:
        """The address that opens ``path`` in JupyterLab workspace ``workspace``."""
        return f"http://127.0.0.1:{self.port}/lab/workspaces/{workspace}/tree/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def _wait_until_ready(lab: Lab) -> None:
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {lab.process.returncode}; its log:\n{lab.log_tail()}")
        try:
            lab.api("status")
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_SECONDS} s; its log:\n{lab.log_tail()}")


def _stop(lab: Lab) -> None:
    """Shut down the server's kernels, then the server; anything of its own left after that is killed."""
    try:
        children = psutil.Process(lab.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    try:
        for kernel in lab.api("kernels"):
            lab.api(f"kernels/{kernel['id']}", method="DELETE")
    except OSError:
        pass  # the server is gone already; its children are handled below
    lab.process.terminate()
    try:
        lab.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        lab.process.kill()
        lab.process.wait(timeout=10)
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        child.kill()


@pytest.fixture(scope="session")
def lab(chromium, tmp_path_factory):
    """JupyterLab from this environment, with nothing of the user's: temporary root, config and settings."""
    home = tmp_path_factory.mktemp("jupyter")
    root = tmp_path_factory.mktemp("lab-root")
    env = {**os.environ,
           **{name: str(home / folder) for name, folder in (
               ("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"), ("JUPYTER_RUNTIME_DIR", "runtime"),
               ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
               ("IPYTHONDIR", "ipython"))},
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    # The one setting that differs from a learner's JupyterLab: every cell stays in the page (no windowing),
    # so what scrolled out of view can still be read.
    tracker = home / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    env.pop("MPLBACKEND", None)  # the test session's Agg would hide figures; a learner's kernel draws inline
    token, port = secrets.token_hex(16), _free_port()
    args = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            # a safety net: should this session be killed before it stops the server, the server stops itself
            "--ServerApp.shutdown_no_activity_timeout=900"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    log = home / "jupyterlab.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(args, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    server = Lab(root, port, token, process, log)
    try:
        _wait_until_ready(server)
        yield server
    finally:
        _stop(server)


@pytest.fixture(scope="session")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chrome = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chrome
        finally:
            chrome.close()


@pytest.fixture
def page(browser, lab):
    """JupyterLab in a new page of a fresh browser context (its console log is kept for the failure report)."""
    lab_page = LabPage.new(browser, lab)
    yield lab_page
    lab_page.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failed browser test: save the screenshot and the console log, and say where in the report."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    values = [v for value in getattr(item, "funcargs", {}).values()
              for v in (value if isinstance(value, tuple) else (value,))]
    lab_page = next((v for v in values if isinstance(v, LabPage)), None)
    if lab_page is None:
        return
    report.sections.append(("browser", lab_page.save_failure(item.name)))
