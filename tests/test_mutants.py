"""The checkers judged by mutants of their own solutions (issue 41): a check can be trusted when a solution that
leaves the lesson's idea out is refused.

``tests/mutation.py`` makes the mutants (one statement deleted, a call's result discarded, a constant changed, an
argument dropped, a collective swapped, the world size or rank made a literal, an operator swapped) and runs each
as the notebook's cell would. A mutant that the checker accepts must be listed in
``tests/mutants/equivalent.yaml`` with the reason it does the same thing as the solution, or, for a checker being
fixed, in ``tests/mutants/open.yaml`` (known open: those checks expect a failure until the fix lands).

- fast tier: the mutants are deterministic and distinct, each kind of edit is made, and the two lists name real
  mutants with a reason (no checker runs);
- every run (``make test``): a fixed sample, one mutant of each exercise in ``SAMPLE``;
- ``make test-all`` (``exhaustive``): every mutant of every exercise; run ``python tests/mutation.py [lesson_X_Y]``
  to see the survivors and the counts of one lesson.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

import mutation
from mutation_contexts import exercises

LISTS = Path(__file__).parent / "mutants"


def _read(name: str) -> dict[str, dict[str, dict]]:
    """A list of mutants, by exercise and key (a key of digits only is read as a string too)."""
    found = yaml.safe_load((LISTS / name).read_text()) or {}
    return {exercise: {str(key): entry for key, entry in (mutants or {}).items()}
            for exercise, mutants in found.items()}


EQUIVALENT, OPEN = _read("equivalent.yaml"), _read("open.yaml")
EXERCISES = {f"{module}:{q}": (module, q, exercise) for module, q, exercise in exercises()}
# One mutant of each of these exercises is judged in every run (under a minute on 2 cores): those whose
# checker runs in this process, and the two distributed checks the issue found too lenient.
SAMPLE = ("start_here:q1", "lesson_1_1:q1", "lesson_1_1:q4", "lesson_1_2:q2", "lesson_1_3:q2", "lesson_2_1:q3",
          "lesson_2_2:q3", "lesson_2_3:q3", "lesson_3_1:q3", "lesson_3_2:q2", "lesson_3_3:q2", "lesson_3_3:q3",
          "lesson_4_1:q2", "lesson_4_2:q1", "lesson_4_3:q2", "lesson_4_3:q3", "lesson_5_1:q3", "lesson_5_1:q4",
          "lesson_5_2:q2", "lesson_5_3:q2", "lesson_5_3:q3", "lesson_5_4:q1", "lesson_5_4:q3", "lesson_6_3:q1",
          "lesson_6_4:q1", "lesson_6_4:q4", "lesson_8_3:q1")


def listed(name: str) -> dict:
    """The mutants of exercise ``name`` that may survive: equivalent ones and known open ones, by key."""
    return {**EQUIVALENT.get(name, {}), **OPEN.get(name, {})}


def counts(name: str) -> dict[str, int]:
    """Mutants, refused, equivalent and open for an exercise: what ``test-all`` proves (everything not listed
    is refused), so it is computed from the mutants and the lists without running a checker."""
    module, q, exercise = EXERCISES[name]
    total = len(mutation.mutants(exercise.solution_code))
    equivalent, still_open = len(EQUIVALENT.get(name, {})), len(OPEN.get(name, {}))
    return {"mutants": total, "refused": total - equivalent - still_open, "equivalent": equivalent,
            "open": still_open}


def lesson_counts() -> dict[str, dict[str, int]]:
    """:func:`counts` summed per lesson (``1.1``; the start page as ``start``)."""
    out: dict[str, dict[str, int]] = {}
    for name in EXERCISES:
        module = name.split(":")[0]
        lesson = "start" if module == "start_here" else module.removeprefix("lesson_").replace("_", ".")
        total = out.setdefault(lesson, dict.fromkeys(("mutants", "refused", "equivalent", "open"), 0))
        for key, value in counts(name).items():
            total[key] += value
    return out


README_COLUMN = {"README.md": ("mutants: refused / equivalent", "open"),
                 "README.pt-BR.md": ("mutantes: recusados / equivalentes", "em aberto")}


def readme_cell(figures: dict[str, int], still_open: str) -> str:
    """What a lesson's row shows: refused / equivalent, and the open ones when there are some."""
    cell = f"{figures['refused']} / {figures['equivalent']}"
    return cell + (f" ({figures['open']} {still_open})" if figures["open"] else "")


@pytest.mark.parametrize("readme", README_COLUMN)
def test_the_readme_table_states_the_mutants_of_each_lesson(readme):
    """The lesson table's last column is computed here (refused / equivalent, and the known open ones), never
    typed by hand; ``make test-all`` proves the rest refused."""
    heading, still_open = README_COLUMN[readme]
    text = (Path(__file__).parents[1] / readme).read_text()
    table = [line for line in text.splitlines() if line.startswith("| ") and line.rstrip().endswith(" |")]
    assert any(line.rstrip(" |").endswith(heading) for line in table), f"{readme}: no column '{heading}'"
    rows = {}
    for line in table:
        label = line.split("|")[1].strip()
        lesson = "start" if label in ("Comece aqui", "Start here") else label.split(" ")[0]
        rows[lesson] = line.rstrip(" |").rsplit("|", 1)[1].strip()
    for lesson, figures in lesson_counts().items():
        if lesson == "start" and lesson not in rows:
            continue
        want = readme_cell(figures, still_open)
        assert rows.get(lesson) == want, f"{readme}: lesson {lesson} shows {rows.get(lesson)!r} mutants; write {want!r}"


# ------------------------------------------------------------------ fast: the mutants and the lists

def test_mutants_are_deterministic_distinct_and_never_the_solution():
    for name, (_, _, exercise) in EXERCISES.items():
        made = mutation.mutants(exercise.solution_code)
        if name in SAMPLE[:6]:  # made anew (not from the cache): the same mutants in the same order
            assert made == mutation.mutants.__wrapped__(exercise.solution_code), f"{name}: mutants differ"
        codes = [m.code for m in made]
        assert len(set(codes)) == len(codes) and len({m.key for m in made}) == len(made), f"{name}: duplicates"
        assert mutation.solution_body(exercise) not in codes, f"{name}: a mutant is the solution itself"
        assert made, f"{name}: no mutant"


SNIPPET = """
def f(model, tensor, accelerator):
    model = accelerator.prepare(model)
    dist.all_reduce(tensor)
    tensor /= dist.get_world_size()
    if accelerator.is_main_process and 3 < 4:
        print("kept")
    return model, tensor + 1.5

q1.check(f)
"""


def test_every_kind_of_edit_is_made():
    made = {m.code: m for m in mutation.mutants(SNIPPET)}
    assert {m.kind for m in made.values()} == set(mutation.KINDS)
    body = mutation.solution_body(type("E", (), {"solution_code": SNIPPET}))
    expect = {  # one edit of each kind, as the learner could have written it
        "discard": ("model = accelerator.prepare(model)", "accelerator.prepare(model)"),
        "collective": ("dist.all_reduce(tensor)", "dist.broadcast(tensor)"),
        "literal": ("tensor /= dist.get_world_size()", "tensor /= 2"),
        "operator": ("3 < 4", "3 <= 4"),
        "constant": ("tensor + 1.5", "tensor + 3.0"),
        "argument": ("dist.all_reduce(tensor)", "dist.all_reduce()"),
    }
    for kind, (before, after) in expect.items():
        code = body.replace(before, after, 1)
        assert code in made and made[code].kind == kind, f"no {kind} mutant turning {before!r} into {after!r}"
    deleted = ast.unparse(ast.parse(body.replace("    dist.all_reduce(tensor)\n", "")))
    assert deleted in made and made[deleted].kind == "delete"
    assert "pass" not in "".join(made), "a print call was deleted (prints are never mutated)"


@pytest.mark.parametrize("lists", ["equivalent", "open"])
def test_the_lists_name_current_mutants_each_with_its_reason(lists):
    entries = {"equivalent": EQUIVALENT, "open": OPEN}[lists]
    for name, mutants in entries.items():
        assert name in EXERCISES, f"{lists}.yaml names {name}, which is no exercise"
        made = {m.key: m for m in mutation.mutants(EXERCISES[name][2].solution_code)}
        for key, entry in mutants.items():
            assert key in made, (f"{lists}.yaml: {name} has no mutant {key} ({entry.get('what')}) any more: the "
                                 "solution changed; run python tests/mutation.py and list what survives now")
            assert entry.get("why", "").strip(), f"{lists}.yaml: {name} {key}: give the reason (why:)"
            assert entry.get("what") == f"{made[key].kind}: {made[key].what}", (
                f"{lists}.yaml: {name} {key}: write what the mutant does as the harness names it: "
                f"{made[key].kind}: {made[key].what}")
    both = {n: set(EQUIVALENT[n]) & set(OPEN.get(n, {})) for n in EQUIVALENT}
    assert not any(both.values()), f"listed both as equivalent and as open: {both}"


# ------------------------------------------------------------------ judged: a sample in every run, all in test-all

def _judge(name: str, keys: set[str] | None) -> dict:
    module, q, exercise = EXERCISES[name]
    verdicts = mutation.judge_all(module, q, exercise, keys)
    survived = {k for k, (verdict, *_) in verdicts.items() if verdict == mutation.SURVIVED}
    unlisted = {k: verdicts[k][2] for k in survived - set(listed(name))}
    assert not unlisted, (f"{name}: the checker accepts these mutants of the solution: {unlisted}. Make the "
                          "checker refuse them, or list them in tests/mutants/equivalent.yaml with the reason "
                          "they do the same thing")
    wrongly = {k: verdicts[k][1] for k in set(EQUIVALENT.get(name, {})) & set(verdicts) - survived}
    assert not wrongly, f"{name}: listed as equivalent but refused (the checker refuses a right answer?): {wrongly}"
    fixed = set(OPEN.get(name, {})) & set(verdicts) - survived
    assert not fixed, f"{name}: now refused, remove them from tests/mutants/open.yaml: {sorted(fixed)}"
    print(f"{name}: {counts(name)}")
    return verdicts


def sample_key(name: str) -> str:
    """The sampled mutant of an exercise: the one with the smallest key among those not listed (a refused one)."""
    return min(m.key for m in mutation.mutants(EXERCISES[name][2].solution_code) if m.key not in listed(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLE)
def test_a_sampled_mutant_is_refused(name):
    _judge(name, {sample_key(name)})


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(EXERCISES))
def test_every_mutant_is_refused_or_listed(name):
    _judge(name, None)
    if OPEN.get(name):
        pytest.xfail(f"{name}: {len(OPEN[name])} known open survivor(s), tests/mutants/open.yaml")
