"""Test set-up: never touch the network, keep the workbook's cache inside the test session."""

import os
import shutil
import tempfile

import matplotlib

os.environ["HF_HUB_OFFLINE"] = "1"
# The one offline switch the tests rely on is HF_HUB_OFFLINE (set above; a test that needs it unset unsets it):
# the other two a user may have set would change what those tests see, so the session starts without them.
for _variable in ("TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.pop(_variable, None)
os.environ.setdefault("EFFITRAIN_SIZE", "small")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the kernels and ranks run (effitrain_helpers/__init__.py)
os.environ["MPLBACKEND"] = "Agg"
matplotlib.use("Agg")
# Matplotlib builds its font cache on first use by running fc-list: build it now, before the fast tier refuses
# to start processes, so `make test-fast` passes on a machine that never drew a figure.
import matplotlib.font_manager  # noqa: E402, F401
# Notebook kernels started by nbval inherit this, so the whole session builds the offline model once, here;
# a cache folder the session made itself is removed when it ends (one given in EFFITRAIN_CACHE is kept).
_SESSION_CACHE = None
if not os.environ.get("EFFITRAIN_CACHE"):
    _SESSION_CACHE = os.environ["EFFITRAIN_CACHE"] = tempfile.mkdtemp(prefix="effitrain-test-cache-")

import subprocess  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request, monkeypatch):
    """The fast tier (``make test-fast``, ``-m "not slow"``) starts no process: a test that starts one (a
    launch, the CLI in a subprocess, a kernel) fails here unless it is marked ``slow`` (or ``quick_process``:
    the linter)."""
    if not any(request.node.get_closest_marker(m) for m in ("slow", "quick_process")):
        def refuse(self, args, *rest, **options):
            pytest.fail(f"{request.node.nodeid} starts a process ({args!r}); mark it @pytest.mark.slow "
                        "(or pytestmark = pytest.mark.slow for a whole module), or run it in this process.",
                        pytrace=False)

        monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    yield


def pytest_sessionfinish(session, exitstatus):
    """Remove the cache folder this session made (nothing left in the temp folder by a test run)."""
    if _SESSION_CACHE:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption("--judged-census", metavar="PATH", default=None,
                     help="write how many collected tests judge each exercise, by kind, as JSON to PATH "
                          "(the judges marker; tests/test_judged_census.py)")


def pytest_collection_finish(session):
    """With ``--judged-census PATH``: ``{"6.3 q2": {"right": 2, "mistake": 3}, ...}`` over the collected tests
    (a parametrized test counts once per case; a test may judge several exercises)."""
    path = session.config.getoption("--judged-census")
    if not path:
        return
    import json

    counts: dict[str, dict[str, int]] = {}
    for item in session.items:
        for mark in item.iter_markers("judges"):
            exercise, kind = mark.args
            counts.setdefault(exercise, {}).setdefault(kind, 0)
            counts[exercise][kind] += 1
    with open(path, "w") as out:
        json.dump(counts, out, indent=1, sort_keys=True)
