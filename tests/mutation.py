"""Mutants of an exercise's own solution, and the checker's verdict on each (issue 41's mutation harness).

A checker can be trusted when a solution that leaves the lesson's idea out is refused. :func:`mutants` makes,
from the syntax tree of an exercise's ``solution_code``, every small wrong version of it:

- ``delete``: one statement deleted (``pass`` where a block would be left empty);
- ``discard``: a call's result thrown away (``model = accelerator.prepare(model)`` becomes
  ``accelerator.prepare(model)``);
- ``constant``: one number, boolean or string changed (``n`` to ``n + 1``, ``x`` to ``2 * x``, ``0.0`` to ``1.0``,
  ``True`` to ``False``, ``"s"`` to ``"s_"``);
- ``argument``: one positional or keyword argument of a call dropped;
- ``collective``: a collective swapped for another (``all_reduce`` for ``broadcast``, ``gather_for_metrics`` for
  ``gather``, ...);
- ``literal``: the world size or the rank replaced by a literal (``dist.get_world_size()`` by ``2``,
  ``accelerator.num_processes`` by ``2``, ``dist.get_rank()`` by ``0``, ...);
- ``operator``: one arithmetic or comparison operator swapped (``+``/``-``, ``*``/``/``, ``<``/``<=``, ...).

What is never mutated, because it cannot change the answer the check receives: import statements, docstrings,
``print(...)`` calls, the definitions themselves (``def``/``class`` lines) and the cell's ``qN.check(...)`` call.

Mutants are deterministic (the tree is walked in order) and de-duplicated (two edits giving the same code are one
mutant); each is named by :attr:`Mutant.key`, the first 10 hex digits of the sha1 of its code, which stays the same
when other lines of the solution change. :func:`judge` runs one mutant as the notebook would (the lesson's
imports, the exercise's context from ``tests/mutants/contexts.py``, then the cell's own ``qN.check(...)`` call) and
returns the verdict.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterator

COLLECTIVE_SWAPS = {  # a collective and the one it is swapped for (same arguments, another meaning)
    "all_reduce": "broadcast", "broadcast": "all_reduce", "reduce": "all_reduce",
    "all_gather": "all_gather_object", "all_gather_into_tensor": "reduce_scatter_tensor",
    "reduce_scatter_tensor": "all_gather_into_tensor", "isend": "irecv", "irecv": "isend", "send": "recv",
    "recv": "send", "gather_for_metrics": "gather", "gather": "gather_for_metrics",
}
WORLD_AND_RANK_CALLS = {"get_world_size": 2, "get_rank": 0}  # a call naming the world size or rank: its literal
WORLD_AND_RANK = {"num_processes": 2, "process_index": 0, "local_process_index": 0,  # the same, as attributes
                  "is_main_process": True, "is_local_main_process": True}
ENVIRONMENT_LITERALS = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
OPERATOR_SWAPS = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE,
    ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
KINDS = ("delete", "discard", "constant", "argument", "collective", "literal", "operator")


@dataclass(frozen=True)
class Mutant:
    """One wrong version of a solution: its code, the kind of edit, and what was changed (for a reader)."""

    code: str
    kind: str
    what: str

    @property
    def key(self) -> str:
        return hashlib.sha1(self.code.encode()).hexdigest()[:10]


def split_check_call(solution_code: str) -> tuple[ast.Module, ast.Call]:
    """The solution's code without its last statement, and that statement: the cell's ``qN.check(...)`` call."""
    tree = ast.parse(solution_code)
    last = tree.body[-1]
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and isinstance(last.value.func, ast.Attribute) and last.value.func.attr == "check"):
        raise ValueError(f"the solution does not end with a qN.check(...) call: {ast.unparse(last)!r}")
    return ast.Module(body=tree.body[:-1], type_ignores=[]), last.value


def _fixed(node: ast.AST) -> bool:
    """Statements never mutated: imports, docstrings, print calls."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _called(node.value) == "print"


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _edits(tree: ast.Module) -> Iterator[tuple[ast.AST, str, str, Callable[[ast.AST], ast.AST | None]]]:
    """``(node, kind, what, edit)`` for every edit of ``tree``: ``edit(copy)`` receives the node's copy in a fresh
    copy of the tree and returns its replacement (a node, or None to delete it)."""
    skip = set()
    for node in ast.walk(tree):
        if _fixed(node):
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):  # the docstring of a def stays
            skip.update(id(n) for n in node.decorator_list for n in ast.walk(n))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        text = ast.unparse(node) if isinstance(node, (ast.stmt, ast.expr)) else ""
        line, column = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
        where = f"line {line} col {column}: {text.splitlines()[0][:80] if text else ''}"
        if isinstance(node, ast.stmt) and not (isinstance(node, (ast.FunctionDef, ast.ClassDef))
                                               and node in tree.body):
            yield node, "delete", f"delete {where}", lambda n: None
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            yield node, "discard", f"discard the result of {where}", lambda n: ast.Expr(value=n.value)
        if isinstance(node, ast.Constant) and not isinstance(node.value, (type(None), bytes, complex)) \
                and node.value is not Ellipsis:
            value = node.value
            changed = (not value if isinstance(value, bool) else value + 1 if isinstance(value, int)
                       else (value * 2 if value else 1.0) if isinstance(value, float) else value + "_")
            yield node, "constant", f"{where} -> {changed!r}", lambda n, c=changed: ast.Constant(value=c)
        if isinstance(node, ast.Call):
            for i in range(len(node.args)):
                yield node, "argument", f"drop argument {i + 1} of {where}", \
                    lambda n, i=i: ast.Call(func=n.func, args=n.args[:i] + n.args[i + 1:], keywords=n.keywords)
            for i, kw in enumerate(node.keywords):
                yield node, "argument", f"drop {kw.arg or '**'}= of {where}", \
                    lambda n, i=i: ast.Call(func=n.func, args=n.args, keywords=n.keywords[:i] + n.keywords[i + 1:])
            name = _called(node)
            if isinstance(node.func, ast.Attribute) and name in COLLECTIVE_SWAPS:
                swap = COLLECTIVE_SWAPS[name]
                yield node, "collective", f"{name} -> {swap} in {where}", lambda n, s=swap: ast.Call(
                    func=ast.Attribute(value=n.func.value, attr=s, ctx=ast.Load()), args=n.args,
                    keywords=n.keywords)
            if name in WORLD_AND_RANK_CALLS and not node.args:
                literal = WORLD_AND_RANK_CALLS[name]
                yield node, "literal", f"{name}() -> {literal!r} in {where}", lambda n, v=literal: ast.Constant(value=v)
        if isinstance(node, ast.Attribute) and node.attr in WORLD_AND_RANK and isinstance(node.ctx, ast.Load):
            literal = WORLD_AND_RANK[node.attr]
            yield node, "literal", f".{node.attr} -> {literal!r} in {where}", lambda n, v=literal: ast.Constant(value=v)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and node.slice.value in ENVIRONMENT_LITERALS and "environ" in ast.unparse(node.value):
            literal = ENVIRONMENT_LITERALS[node.slice.value]
            yield node, "literal", f"{where} -> {literal!r}", lambda n, v=literal: ast.Constant(value=v)
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in OPERATOR_SWAPS:
            swap = OPERATOR_SWAPS[type(node.op)]
            yield node, "operator", f"{type(node.op).__name__} -> {swap.__name__} in {where}", \
                lambda n, s=swap: _with(n, op=s())
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in OPERATOR_SWAPS:
                    swap = OPERATOR_SWAPS[type(op)]
                    yield node, "operator", f"{type(op).__name__} -> {swap.__name__} in {where}", \
                        lambda n, i=i, s=swap: _with(n, ops=n.ops[:i] + [s()] + n.ops[i + 1:])


def _with(node: ast.AST, **fields: Any) -> ast.AST:
    new = copy.copy(node)
    for name, value in fields.items():
        setattr(new, name, value)
    return new


def _parents(tree: ast.AST) -> dict[int, tuple[ast.AST, str, int | None]]:
    """Where each node sits: ``id(node) -> (parent, field, index in the field's list or None)``."""
    found = {}
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if isinstance(value, list):
                found.update((id(child), (parent, name, i)) for i, child in enumerate(value)
                             if isinstance(child, ast.AST))
            elif isinstance(value, ast.AST):
                found[id(value)] = (parent, name, None)
    return found


def _edited(tree: ast.Module, where: tuple[ast.AST, str, int | None], node: ast.AST, edit: Callable) -> str:
    """The code of ``tree`` with ``edit`` applied to ``node`` (found at ``where``), the tree left as it was."""
    parent, name, index = where
    before = getattr(parent, name)
    replacement = edit(node)
    if index is None:
        setattr(parent, name, replacement)
    else:
        block = before[:index] + ([] if replacement is None else [replacement]) + before[index + 1:]
        setattr(parent, name, block or [ast.Pass()])  # a block left empty gets ``pass``
    try:
        return ast.unparse(tree)
    finally:
        setattr(parent, name, before)


@functools.cache
def mutants(solution_code: str) -> tuple[Mutant, ...]:
    """Every mutant of ``solution_code`` (without its ``qN.check`` call), de-duplicated, in a fixed order; a
    mutant whose code equals the solution's own is left out. Cached: ``mutants.__wrapped__`` makes them anew."""
    tree, _ = split_check_call(solution_code)
    original = ast.unparse(tree)
    parents = _parents(tree)
    seen, found = {original}, []
    for node, kind, what, edit in _edits(tree):
        code = _edited(tree, parents[id(node)], node, edit)
        if code not in seen:
            seen.add(code)
            found.append(Mutant(code, kind, what))
    return tuple(found)


REFUSED, SURVIVED = "refused", "survived"


class _Hung(Exception):
    pass


def _alarm(signum, frame):
    raise _Hung


def judge(module: str, q: str, exercise: Any, code: str, timeout: int = 240) -> tuple[str, str]:
    """``(verdict, why)`` for ``code`` (a mutant, or the solution itself) run as exercise ``q``'s cell: the code,
    then the cell's own ``qN.check(...)`` arguments given to the checker. *Refused* when the cell raises, the
    check is not Correct, or the cell runs past ``timeout`` seconds; *survived* when the check says Correct."""
    from mutation_contexts import namespace

    _, call = split_check_call(exercise.solution_code)
    cell = dict(namespace(module, q))
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        exec(compile(code, f"<{module}:{q} mutant>", "exec"), cell)
        args = [eval(compile(ast.Expression(a), "<check call>", "eval"), cell) for a in call.args]
        result = exercise.evaluate(*args)
    except _Hung:
        return REFUSED, f"the cell ran past {timeout} s"
    except Exception as err:  # noqa: BLE001 - the notebook shows it, the learner sees their cell fail
        return REFUSED, f"the cell raised {type(err).__name__}: {str(err)[:120]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if result.status == "correct":
        return SURVIVED, "Correct"
    return REFUSED, f"{result.status}: {result.message[:160]}"


def solution_body(exercise: Any) -> str:
    """The exercise's solution without its check call, as the mutants are written (``ast.unparse``)."""
    return ast.unparse(split_check_call(exercise.solution_code)[0])


def judge_all(module: str, q: str, exercise: Any, keys: set[str] | None = None) -> dict[str, tuple[str, str, str]]:
    """``{mutant key: (verdict, why, what)}`` for every mutant of the exercise (those in ``keys`` when given);
    what the learner's code prints is not shown, and what it writes in its current folder (a Trainer given no
    output_dir writes trainer_output/ there) goes to a temporary folder, removed at the end."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="effitrain-mutants-") as folder:
        here = os.getcwd()
        os.chdir(folder)
        try:
            return _judge_each(module, q, exercise, keys)
        finally:
            os.chdir(here)


def _judge_each(module: str, q: str, exercise: Any, keys: set[str] | None) -> dict[str, tuple[str, str, str]]:
    import contextlib
    import io

    import time

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        verdict, why = judge(module, q, exercise, solution_body(exercise))
    if verdict != SURVIVED:
        raise AssertionError(f"{module}:{q}: the solution itself is refused here ({why}): fix its context")
    timeout = max(20, round(10 * (time.perf_counter() - start)))  # a mutant 10 times slower than it hangs
    found = {}
    for mutant in mutants(exercise.solution_code):
        if keys is not None and mutant.key not in keys:
            continue
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            verdict, why = judge(module, q, exercise, mutant.code, timeout)
        found[mutant.key] = (verdict, why, f"{mutant.kind}: {mutant.what}")
    return found


def main(argv: list[str] | None = None) -> None:
    """``python tests/mutation.py [lesson_X_Y[:qN] ...] [--json FILE]``: judge every mutant of those exercises
    (all when none is named) and print, per exercise, its survivors and its counts."""
    import argparse
    import json
    import sys
    import time

    from mutation_contexts import exercises

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("only", nargs="*")
    parser.add_argument("--json", help="append one JSON line per exercise to this file")
    options = parser.parse_args(argv)
    for module, q, exercise in exercises():
        if options.only and not any(f"{module}:{q}" == o or module == o for o in options.only):
            continue
        start = time.perf_counter()
        verdicts = judge_all(module, q, exercise)
        survivors = {k: v for k, v in verdicts.items() if v[0] == SURVIVED}
        print(f"{module}:{q}: {len(verdicts)} mutants, {len(verdicts) - len(survivors)} refused, "
              f"{len(survivors)} survived ({time.perf_counter() - start:.0f} s)", flush=True)
        for key, (_, _, what) in survivors.items():  # as tests/mutants/*.yaml lists them
            print(f"    {key}:\n      what: {json.dumps(what)}\n      why: ", flush=True)
        if options.json:
            with open(options.json, "a") as out:
                out.write(json.dumps({"exercise": f"{module}:{q}", "verdicts": verdicts}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
