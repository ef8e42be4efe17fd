"""How do two versions of a function differ? A side-by-side view with the changed lines highlighted
(lesson 2.2: a plain PyTorch loop beside its Accelerate version), built from the code that actually runs."""

from __future__ import annotations

import ast
import difflib
import html
import inspect
import textwrap
from typing import Callable


def changed_lines(before: Callable, after: Callable) -> list[tuple[str, str]]:
    """(old line, new line) for every line that differs between the two functions' bodies."""
    a, b = _body(before), _body(after)
    pairs = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            old, new = a[i1:i2], b[j1:j2]
            width = max(len(old), len(new))
            pairs += [(old[k] if k < len(old) else "", new[k] if k < len(new) else "") for k in range(width)]
    return pairs


def side_by_side(before: Callable, after: Callable, titles: tuple[str, str] = ("before", "after")):
    """An HTML table of both functions, line against line, changed lines highlighted (for a notebook)."""
    from IPython.display import HTML

    a, b = _body(before), _body(after)
    rows = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        old, new = a[i1:i2], b[j1:j2]
        for k in range(max(len(old), len(new))):
            left = old[k] if k < len(old) else ""
            right = new[k] if k < len(new) else ""
            style = "" if tag == "equal" else ' style="background:#fff3b0"'
            rows.append(f"<tr{style}><td><pre>{html.escape(left)}</pre></td><td><pre>{html.escape(right)}</pre></td></tr>")
    head = "".join(f"<th style='text-align:left'>{html.escape(t)}</th>" for t in titles)
    return HTML("<table style='font-size:12px'><tr>" + head + "</tr>" + "".join(rows) + "</table>")


def _body(fn: Callable) -> list[str]:
    """Source lines of ``fn`` after its signature and docstring."""
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
    body = ast.parse("\n".join(lines)).body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    return lines[body[0].lineno - 1:]
