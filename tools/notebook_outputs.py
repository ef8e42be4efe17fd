"""Apply and check the workbook's notebook outputs policy (see README, "Contributing").

Policy: notebooks are stored without outputs, except cells tagged ``nbval-check-output``: their outputs are
stored and nbval compares them (the tests run nbval with ``--nbval-lax``, so every other cell is executed
and must not raise, but its output is not compared). Tagged cells print only what is the same on every
machine (self-check verdicts, exercise results), never timings, device names or paths.

    python tools/notebook_outputs.py notebooks/*.ipynb            # execute offline, keep tagged outputs
    python tools/notebook_outputs.py --check notebooks/*.ipynb    # report policy violations, exit 1 if any
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import nbformat

CHECK_TAG = "nbval-check-output"
LOCAL_PATH = re.compile(r"(/home/|/root/|/Users/|[A-Z]:\\\\Users|site-packages)")


def is_checked(cell) -> bool:
    return CHECK_TAG in cell.get("metadata", {}).get("tags", [])


def clean(nb) -> None:
    """Drop outputs and execution counts of untagged cells; tagged cells keep theirs (nbval skips a
    cell whose stored execution count is empty, treating it as never run). Widget state, which changes at
    every run, is dropped too."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        if not is_checked(cell):
            cell.outputs = []
            cell.execution_count = None


def problems(nb, name: str) -> list[str]:
    """Every way ``nb`` breaks the policy (an empty list when it follows it)."""
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    checked = [c for c in code if is_checked(c)]
    if not any(c.outputs for c in checked):
        found.append(f"{name}: no cell tagged {CHECK_TAG} with stored output: nothing would be compared")
    if "widgets" in nb.metadata:
        found.append(f"{name}: widget state is stored in the notebook's metadata (run this tool to clean it)")
    if not any(re.search(r"^\s*assert\b", c.source, re.M) for c in code):
        found.append(f"{name}: no assert statement: the notebook checks nothing itself")
    for i, cell in enumerate(code):
        if is_checked(cell) and cell.execution_count is None:
            found.append(f"{name}: code cell {i} is tagged but has no execution count: nbval would skip it")
        if cell.outputs and not is_checked(cell):
            found.append(f"{name}: code cell {i} is untagged but has stored outputs (run this tool to clean it)")
        for out in cell.outputs:
            if out.get("output_type") == "error":
                found.append(f"{name}: code cell {i} stores an error")
            if LOCAL_PATH.search(json.dumps(out)):
                found.append(f"{name}: code cell {i} stores a local path")
    return found


def execute(path: Path) -> None:
    """Run ``path`` top to bottom offline in the small size, then clean it in place."""
    from nbclient import NotebookClient

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("EFFITRAIN_SIZE", "small")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    clean(nb)
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="only report policy violations")
    args = parser.parse_args(argv)
    issues = []
    for path in args.notebooks:
        if not args.check:
            execute(path)
            print(f"executed and cleaned {path}")
        issues += problems(nbformat.read(path, as_version=4), str(path))
    for issue in issues:
        print(issue, file=sys.stderr)
    return 1 if issues else 0


if __name__ == "__main__":
    sys.exit(main())
