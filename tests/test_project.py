"""The project's promises about itself: set-up files agree, notebooks follow the outputs policy,
importing the helpers is cheap, nothing trusts remote code."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import notebook_outputs  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _normal(requirement: str) -> str:
    return requirement.replace(" ", "").lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    import yaml

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "effitrain"
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_pkgs = {_normal(d).replace("pytorch", "torch", 1) for d in conda if _name(d) not in {"python", "pip"}}
    pip_pkgs = {_normal(d) for d in pip if not d.startswith("-")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_normal(d) for d in project["dependencies"] + project["optional-dependencies"]["test"]}
    assert conda_pkgs | pip_pkgs == wanted
    assert "--editable ." in pip


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_outputs_policy(path):
    assert notebook_outputs.problems(nbformat.read(path, as_version=4), path.name) == []


def test_policy_catches_a_notebook_that_checks_nothing():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    found = notebook_outputs.problems(nb, "empty.ipynb")
    assert any("nothing would be compared" in f for f in found) and any("no assert" in f for f in found)


def test_every_lesson_of_chapter_one_is_numbered():
    assert any(p.name.startswith("1_1_") for p in NOTEBOOKS)


@pytest.mark.slow
def test_importing_the_helpers_does_not_import_heavy_libraries():
    code = (
        "import sys, effitrain_helpers, effitrain_helpers.core.settings, effitrain_helpers.sources.models, "
        "effitrain_helpers.teach.exercises, effitrain_helpers.teach.plots, effitrain_helpers.cli\n"
        "heavy = [m for m in ('transformers', 'accelerate', 'datasets', 'matplotlib') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_nothing_trusts_remote_code():
    pattern = re.compile(r"trust_remote_code\s*=\s*True")
    files = list((ROOT / "effitrain_helpers").rglob("*.py")) + NOTEBOOKS + list((ROOT / "benchmarks").glob("*.py"))
    assert [f.name for f in files if pattern.search(f.read_text())] == []


def test_no_two_test_files_share_a_name():
    """pytest imports test modules by basename (rootdir-relative packages are not used here), so two files
    called the same in different folders stop the whole collection (CI failed so on tests/test_site.py)."""
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path.relative_to(ROOT)} and {seen[path.name].relative_to(ROOT)} share a name"
        seen[path.name] = path


MAX_CELL_LINES = 25  # issue 26: a loop cell carries the loop; counters, timers and reports go to a helper


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "notebooks" / "pt-BR").glob("*.ipynb")),
                         ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_no_code_cell_is_longer_than_a_screen(path):
    """Every code cell a learner reads fits in MAX_CELL_LINES lines (a translated notebook's language cell
    included: it is a cell of its own)."""
    long = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code":
            lines = cell.source.splitlines()
            if len(lines) > MAX_CELL_LINES:
                long.append(f"{cell.get('id')} ({len(lines)} lines)")
    assert not long, f"{path.name}: code cells over {MAX_CELL_LINES} lines: {', '.join(long)}"


def test_waiting_threads_sleep_in_the_package_the_kernels_and_the_tests(monkeypatch):
    """OMP_WAIT_POLICY=PASSIVE (effitrain_helpers/__init__.py says why): set by the package for what it starts, by
    the kernel spec every install writes (Makefile and both READMEs' manual steps), and by the Makefile's tests."""
    import importlib

    import effitrain_helpers

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    importlib.reload(effitrain_helpers)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    importlib.reload(effitrain_helpers)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"  # a user's own choice stays
    installs = [line for name in ("Makefile", "README.md", "README.pt-BR.md")
                for line in (ROOT / name).read_text().replace("\\\n", " ").splitlines() if "ipykernel install" in line]
    assert len(installs) == 5 and all("--env OMP_WAIT_POLICY PASSIVE" in line for line in installs), installs
    assert "export OMP_WAIT_POLICY ?= PASSIVE" in (ROOT / "Makefile").read_text()
