"""Core's module graph has no import cycle, counting every import statement wherever it stands.

A ``TYPE_CHECKING`` block or a function-level import hides a cycle at run time, not in the
design: the graph below counts every ``import`` / ``from ... import`` node in each file.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterable
from pathlib import Path

import memtap

SRC = Path(memtap.__file__).resolve().parent
PACKAGE = "memtap"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from`` import names (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _target(name: str, modules: set[str]) -> str | None:
    """The memtap module that ``name`` names (its longest prefix that is a module)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def module_imports(source: str, module: str, is_package: bool, modules: Iterable[str]) -> set[str]:
    """The ``modules`` that ``source`` (the text of ``module``) imports, anywhere in it."""
    known = set(modules)
    edges: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, module, is_package)
            # ``from memtap import request`` imports the subpackage; ``from memtap import X``
            # the package itself.
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        edges |= {t for t in (_target(n, known) for n in names) if t is not None}
    edges.discard(module)
    return edges


def import_graph() -> dict[str, set[str]]:
    """Every memtap module -> the memtap modules it imports (anywhere in the file)."""
    modules = _modules()
    return {
        module: module_imports(path.read_text(encoding="utf-8"), module, path.name == "__init__.py", modules)
        for module, path in modules.items()
    }


def _cycle_members(graph: dict[str, set[str]]) -> list[str]:
    """The modules that lie on some cycle (strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    members: list[str] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                members.extend(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return members


def test_the_graph_sees_every_kind_of_import() -> None:
    source = """
from typing import TYPE_CHECKING
import json
from .protocol.model import Message
from .protocol import wire
if TYPE_CHECKING:
    from .request.tap import Tap

def later():
    from memtap.storage.store import Store
    import memtap.redact

class C:
    def method(self):
        from . import __version__
"""
    modules = [
        "memtap",
        "memtap.a",
        "memtap.protocol.model",
        "memtap.protocol.wire",
        "memtap.request.tap",
        "memtap.storage.store",
        "memtap.redact",
    ]
    found = module_imports(source, "memtap.a", False, modules)
    assert found == {
        "memtap",
        "memtap.protocol.model",
        "memtap.protocol.wire",
        "memtap.request.tap",
        "memtap.storage.store",
        "memtap.redact",
    }
    graph = import_graph()
    assert "memtap.memory" in graph["memtap"] and "memtap.request.tap" in graph["memtap.memory"]


def test_core_has_no_import_cycle() -> None:
    graph = import_graph()
    # ``memtap/__init__.py`` counts like any module: a submodule importing ``memtap`` (for
    # ``__version__``, say) closes a cycle through the facade.
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        # graphlib lists each module before the one importing it: reversed, it reads
        # "a imports b imports c".
        cycle = " imports ".join(reversed(error.args[1]))
        members = ", ".join(_cycle_members(graph))
        raise AssertionError(f"import cycle: {cycle}\nall modules on a cycle: {members}") from None


#: The contracts: record types, wire and storage protocols, hook specifications, the embedder
#: port, redaction. Plugins are written against these; none may reach the request path.
CONTRACTS = {
    "memtap._version",
    "memtap.protocol.anchors",
    "memtap.protocol.embedder",
    "memtap.protocol.markers",
    "memtap.errors",
    "memtap.hookspecs",
    "memtap.protocol.model",
    "memtap.redact",
    "memtap.storage.store",
    "memtap.protocol.wire",
}


def test_contracts_are_leaves() -> None:
    graph = import_graph()
    for contract in sorted(CONTRACTS):
        reached: set[str] = set()
        todo = [contract]
        while todo:
            for target in graph.get(todo.pop(), set()):
                if target not in reached:
                    reached.add(target)
                    todo.append(target)
        assert reached <= CONTRACTS, f"{contract} imports {sorted(reached - CONTRACTS)}"


#: Core's rooms, bottom first: each may import the rooms before it, never one after it.
ROOMS = [
    "protocol",
    "storage",
    "formats",
    "workers",
    "history",
    "capture",
    "request",
    "adapters",
    "longterm",
    "cli",
]


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ROOMS else None


def test_every_subpackage_is_a_known_room() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages - {"testing"} == set(ROOMS)


def test_rooms_import_only_rooms_below_them() -> None:
    """The folders are layers: a room imports only rooms listed before it in ``ROOMS``
    (top-level modules such as ``memory``, ``builtins`` and ``redact`` are not rooms)."""
    upward = []
    for module, targets in import_graph().items():
        source = _room(module)
        for target in targets:
            room = _room(target)
            if source and room and source != room and ROOMS.index(room) > ROOMS.index(source):
                upward.append(f"{module} imports {target}")
    assert not upward, "\n".join(sorted(upward))


def test_contracts_import_nothing_of_memtap_but_contracts() -> None:
    """``protocol/`` is the leaf of the leaves: it imports no other memtap module."""
    graph = import_graph()
    for module in sorted(m for m in graph if _room(m) == "protocol"):
        outside = {t for t in graph[module] if _room(t) != "protocol"}
        assert not outside, f"{module} imports {sorted(outside)}"
