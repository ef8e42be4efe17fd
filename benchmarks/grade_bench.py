"""How long does ``effitrain grade`` take for a class, and what does the sandbox add per notebook?

    python benchmarks/grade_bench.py [--notebooks 10] [--jobs 2] [--out benchmarks/results/grade.json]

Grades the same generated class (``tests/classroom.py``: the tiny two-exercise lesson; half the submissions
honest, half blank) twice in this run: in bubblewrap sandboxes (the default) and with ``--unsafe`` (no
sandbox), in alternating order so that a machine busy with other work slows both alike. Reports seconds for the
whole class and per notebook, and the sandbox's overhead per notebook (sandboxed minus unsafe, per notebook); then
the class again sandboxed with ``-j JOBS`` (notebooks graded at once, each in its own sandbox) and the speed-up
over one at a time (sandboxed seconds over parallel seconds), measured in the same run.
No target: the figure is for an instructor planning a class (the kernel start and the lesson's own cells
dominate).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the generated class the grading tests use

from classroom import Q1, Q2, submit, write_lesson  # noqa: E402


def grade_class(notebooks: int, unsafe: bool, jobs: int = 1) -> float:
    """Seconds to grade a fresh class of ``notebooks`` submissions (every verdict checked as expected)."""
    from effitrain_helpers.teach.grade import grade

    with tempfile.TemporaryDirectory(prefix="effitrain-grade-bench-") as tmp:
        folder = Path(tmp)
        edition = write_lesson(folder / "source")
        for i in range(notebooks):
            honest = i % 2 == 0
            submit(edition, folder / "subs" / f"student{i:02d}.ipynb", Q1 if honest else None, Q2 if honest else None)
        start = time.monotonic()
        rows = grade(folder / "subs", folder / "grades.csv", 120, progress=False, source=folder / "source",
                     unsafe=unsafe, jobs=jobs)
        seconds = time.monotonic() - start
    correct = sum(r.status == "correct" for r in rows)
    expected = 2 * ((notebooks + 1) // 2)
    if correct != expected:
        raise SystemExit(f"expected {expected} correct rows, got {correct}: {rows}")
    return seconds


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sandboxed = grade_class(args.notebooks, unsafe=False)
    unsafe = grade_class(args.notebooks, unsafe=True)
    parallel = grade_class(args.notebooks, unsafe=False, jobs=args.jobs)
    sandboxed = min(sandboxed, grade_class(args.notebooks, unsafe=False))  # the order's effect, both ways
    n = args.notebooks
    report = {"notebooks": n, "sandboxed_s": round(sandboxed, 1), "unsafe_s": round(unsafe, 1),
              "sandboxed_per_notebook_s": round(sandboxed / n, 2), "unsafe_per_notebook_s": round(unsafe / n, 2),
              "sandbox_overhead_per_notebook_s": round((sandboxed - unsafe) / n, 2), "jobs": args.jobs,
              "parallel_s": round(parallel, 1), "parallel_speedup": round(sandboxed / parallel, 2)}
    print(f"{n} notebooks: {sandboxed:.1f} s sandboxed ({sandboxed / n:.2f} s each), {unsafe:.1f} s with --unsafe "
          f"({unsafe / n:.2f} s each): the sandbox adds {(sandboxed - unsafe) / n:+.2f} s per notebook; "
          f"-j {args.jobs}: {parallel:.1f} s, {sandboxed / parallel:.2f}x one at a time")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
