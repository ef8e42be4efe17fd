"""Which lessons does the course have, and which of them are in this workbook? (start page, README, tests)

``SYLLABUS`` lists the course's twelve lessons by number and title, chapter by chapter, then the four of
chapter 5, the four of chapter 6, the three of chapter 7 and those of chapter 8 written so far, which go beyond the course (the one place they are written down). ``lesson_table()`` joins it with what is on disk: the notebook ``notebooks/<major>_<minor>_*.ipynb``
when it exists (its title then comes from the notebook's own first heading), "coming" when it does not yet, and
the notebook's wall time from the latest ``make bench`` report on this machine when there is one. Nothing here
is a measured number written by hand. In another language (``SETTINGS.lang``) the title comes from the lesson's
translated notebook when there is one, and the table's words are translated (``tr``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
BENCH_REPORT = ROOT / "benchmarks" / "results" / "report.json"

CHAPTERS = {
    1: msg("Data preparation with Accelerator"),
    2: msg("Distributed training with Accelerator and Trainer"),
    3: msg("Improving training efficiency"),
    4: msg("Training with efficient optimizers"),
    5: msg("Beyond the course: shard the model, profile a step, survive a crash, go beyond one machine"),
    6: msg("Beyond the course: open the engine (collectives, DDP, ZeRO, model parallelism by hand)"),
    7: msg("Beyond the course: compose and choose (mixed precision across ranks, device meshes, a configuration)"),
    8: msg("Beyond the course: long sequences and many experts"),
}
SYLLABUS = (
    ("1.1", "Prepare models with AutoModel and Accelerator"),
    ("1.2", "Preprocess images and audio"),
    ("1.3", "Preprocess text"),
    ("2.1", "Train models with Trainer"),
    ("2.2", "Train models with Accelerator"),
    ("2.3", "Evaluate models with Accelerator"),
    ("3.1", "Gradient accumulation"),
    ("3.2", "Gradient checkpointing and local SGD"),
    ("3.3", "Mixed precision training"),
    ("4.1", "Balanced training with AdamW"),
    ("4.2", "Memory-efficient training with Adafactor"),
    ("4.3", "8-bit Adam"),
    ("5.1", "Shard the model: FSDP and ZeRO"),
    ("5.2", "Where does a step's time go?"),
    ("5.3", "Checkpoint, crash, resume"),
    ("5.4", "From one machine to many"),
    ("6.1", "Collectives by hand"),
    ("6.2", "Data parallelism by hand"),
    ("6.3", "ZeRO by hand"),
    ("6.4", "Split the layer, split the model"),
    ("7.1", msg("Mixed precision across ranks")),
    ("7.2", msg("A mesh of devices")),
    ("7.3", msg("Choosing a configuration")),
    ("8.1", msg("Attention that fits")),
    ("8.2", msg("Activation memory")),
    ("8.3", msg("Sequence and context parallelism")),
    ("8.4", msg("Experts")),
)


@dataclass(frozen=True)
class Lesson:
    """One lesson: ``notebook`` is its file name (None while it is coming), ``seconds`` its measured wall time."""

    number: str
    chapter: int
    title: str
    notebook: str | None
    seconds: float | None

    @property
    def status(self) -> str:
        return "ready" if self.notebook else "coming"


def _notebook_title(path: Path) -> str | None:
    """The title in the notebook's first heading (``# Lesson 1.1 · Title``, ``# Lição 1.1 · Título``), without
    the lesson number."""
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return None
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            first = "".join(cell.get("source", "")).splitlines()[:1]
            m = re.match(r"#\s*\w+\s+[\d.]+\s*[·:-]?\s*(.+)", first[0]) if first else None
            return m.group(1).strip() if m else None
    return None


def measured_seconds(report: Path = BENCH_REPORT) -> tuple[dict[str, float], str | None]:
    """``({notebook: seconds}, hardware)`` from the latest ``make bench`` report, or ``({}, None)`` without one."""
    try:
        data = json.loads(report.read_text())
        return {r["notebook"]: float(r["seconds"]) for r in data.get("notebooks", [])}, data.get("hardware")
    except (OSError, ValueError, KeyError, TypeError):
        return {}, None


def lesson_table(notebooks: Path = NOTEBOOKS, report: Path = BENCH_REPORT) -> list[Lesson]:
    """Every lesson of ``SYLLABUS``, with its notebook in ``notebooks`` (or None) and its measured time."""
    times, _ = measured_seconds(report)
    rows = []
    for number, title in SYLLABUS:
        major, minor = number.split(".")
        found = sorted(notebooks.glob(f"{major}_{minor}_*.ipynb"))
        path = found[0] if found else None
        translated = path.parent / SETTINGS.lang / path.name if path and SETTINGS.lang != "en" else None
        if SETTINGS.lang != "en" and not (translated and translated.exists()):  # coming, or not translated yet
            title = tr(title) + (tr(" (in English until it is translated)") if path else "")
        else:
            title = (translated and _notebook_title(translated)) or (path and _notebook_title(path)) or title
        rows.append(Lesson(number, int(major), title,
                           path.name if path else None, times.get(path.name) if path else None))
    return rows


def markdown_table(lessons: list[Lesson]) -> str:
    """The lessons as a Markdown table, grouped by chapter (what the start page shows)."""
    lines = [tr("| lesson | title | notebook | time on this machine (`make bench`) |"), "|---|---|---|---|"]
    for chapter, name in CHAPTERS.items():
        lines.append(f"| **{chapter}** | **{tr(name)}** | | |")
        for les in (x for x in lessons if x.chapter == chapter):
            where = f"`{les.notebook}`" if les.notebook else tr("*coming*")
            time = f"{les.seconds:.0f} s" if les.seconds is not None else (tr("not measured yet") if les.notebook
                                                                             else "")
            lines.append(f"| {les.number} | {les.title} | {where} | {time} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the exercises each lesson has (README's table)
START_PAGE = "00"  # the census's name for the start page (its exercises live in checks/start_here.py)


def lesson_exercises() -> dict[str, dict[str, object]]:
    """``{lesson: {name: Exercise}}`` for the start page (``"00"``) and every lesson of ``SYLLABUS`` that has a
    checks module, each exercise under the name the lesson calls it by (``q1``, ``q2``, ...)."""
    import importlib

    from effitrain_helpers.teach.exercises import Exercise

    modules = {START_PAGE: "start_here", **{number: "lesson_" + number.replace(".", "_") for number, _ in SYLLABUS}}
    found = {}
    for lesson, name in modules.items():
        try:
            module = importlib.import_module(f"effitrain_helpers.teach.checks.{name}")
        except ModuleNotFoundError:  # a lesson still coming
            continue
        found[lesson] = {k: v for k, v in vars(module).items() if isinstance(v, Exercise)}
    return found


def exercise_census() -> dict[str, tuple[int, int]]:
    """``{lesson: (API exercises, number exercises)}`` for :func:`lesson_exercises`: an API exercise
    (``Exercise.api``) makes the learner write the lesson's library API, run for real; the others ask for a number
    or a prediction. Counted from the modules themselves, so the README's figures are checked
    (``tests/test_exercise_material.py``), never typed."""
    census = {}
    for lesson, exercises in lesson_exercises().items():
        api = sum(e.api for e in exercises.values())
        census[lesson] = (api, len(exercises) - api)
    return census


# The lessons as a site (tools/site.py, site/conf.py): the page of execution times, and each page's footer.
SITE_EXECUTION_TITLE = msg("When and how long each page was executed")
SITE_EXECUTED_ON = msg("Executed on {machine}, {cores} CPU cores, {ram:.0f} GiB RAM, {system}, on {when}, "
                       "in {seconds:.1f} s.")
