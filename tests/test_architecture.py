"""The package's layers: every import points down (or sideways within a layer), and no modules import each other
in a circle. Read from the source with ``ast``, function-level imports included (README, "What is inside")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "effitrain_helpers"
# Lowest first. A module may import from its own layer or a lower one.
LAYERS = ["core", "sources", "processes", "measure", "engines", "training", "teach", "cli"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    """The layer of ``effitrain_helpers.<layer>...``; None for the package itself."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    return LAYERS.index(parts[1])


def imports_of(path: Path) -> set[str]:
    """Every ``effitrain_helpers`` module that ``path`` imports, at module level or inside functions."""
    found: set[str] = set()
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("effitrain_helpers"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("effitrain_helpers"):
                continue
            for alias in node.names:  # `from pkg import module` imports the module
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    return {m for m in found if m != here}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def test_every_module_sits_in_a_known_layer():
    for name in MODULES:
        parts = name.split(".")
        assert len(parts) == 1 or parts[1] in LAYERS, f"{name}: not in a layer {LAYERS}; add it to one"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of ``graph`` that goes from a lower layer to a higher one, as a readable line."""
    wrong = []
    for name, targets in sorted(graph.items()):
        mine = layer_of(name)
        for target in sorted(targets):
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append(f"{name} ({LAYERS[mine]}) imports {target} ({LAYERS[theirs]})")
    return wrong


def test_imports_point_down_or_sideways():
    wrong = upward_imports(GRAPH)
    assert not wrong, "imports from a lower layer to a higher one:\n" + "\n".join(wrong)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of names (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle():
    cycle = find_cycle({n: {t for t in ts if t in GRAPH} for n, ts in GRAPH.items()})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("graph, cyclic", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"a"}}, True),
])
def test_the_cycle_finder_itself(graph, cyclic):
    assert (find_cycle(graph) is not None) is cyclic


def test_the_layer_rule_sees_an_upward_import():
    """The checker is not blind: core importing teach is reported, teach importing core is not."""
    graph = {"effitrain_helpers.core.x": {"effitrain_helpers.teach.exercises"},
             "effitrain_helpers.teach.y": {"effitrain_helpers.core.settings"}}
    assert upward_imports(graph) == ["effitrain_helpers.core.x (core) imports effitrain_helpers.teach.exercises (teach)"]
