"""Core's module graph has no import cycle and no import up a floor, counting every import
statement wherever it stands.

A ``TYPE_CHECKING`` block or a function-level import hides a cycle at run time, not in the
design: the graph below counts every ``import`` / ``from ... import`` node in each file.
Every room (``storage/``...) and every top-level module (``memory.py``...) has a floor
(:data:`FLOORS`); imports are followed transitively, so a chain that climbs through a
top-level module (``adapters -> request -> a module above longterm -> longterm``) fails
like a direct import would.
"""

from __future__ import annotations

import ast
import graphlib
from collections import deque
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


#: The redaction package's modules (all of them contracts: ``memtap.redact`` re-exports them).
REDACT = {
    f"memtap.redact.{name}"
    for name in (
        "assignments",
        "caches",
        "detectors",
        "dumps",
        "ids",
        "log_filter",
        "records",
        "scanner",
        "streams",
        "structures",
        "text",
        "validators",
    )
}

#: The contracts: record types, wire and storage protocols, hook specifications, the embedder
#: port, the JSON encoder, redaction. Plugins are written against these; none may reach the
#: request path.
CONTRACTS = {
    "memtap._version",
    "memtap.protocol.anchors",
    "memtap.protocol.embedder",
    "memtap.protocol.markers",
    "memtap.protocol.json_encoder",
    "memtap.protocol.secret_names",
    "memtap.errors",
    "memtap.hookspecs",
    "memtap.protocol.model",
    "memtap.redact",
    *REDACT,
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


#: Core's floors, bottom first. A unit is a room (a subpackage, ``storage`` for
#: ``memtap.storage.*``) or a top-level module (``memory`` for ``memtap.memory``;
#: ``__init__`` is the package itself, ``import memtap``). A unit imports only units on
#: floors below its own (never a unit beside it on its floor), counting every import
#: statement and following imports through every module on the way.
FLOORS: list[tuple[str, ...]] = [
    # The leaves: the contracts (protocol/: data model, wire, anchors, embedder port, hook
    # markers) and plain values; they import nothing of memtap.
    ("protocol", "_version", "errors", "memo", "hosts"),
    ("storage", "tokens"),
    # Above storage, which needs none of it (stores take records already redacted), and
    # below everything that redacts.
    ("redact",),
    ("telemetry",),
    ("metrics",),
    # The hook specifications name storage's Store; the plugin manager loads them.
    ("hookspecs",),
    ("plugins",),
    ("formats",),
    ("workers",),
    ("history",),
    ("capture",),
    ("request",),
    ("adapters",),
    ("longterm",),
    # The composition root: core's defaults, each from its room, handed to the plugin manager.
    ("memory",),
    ("__init__",),
    ("testing",),
    # What plugin authors import, and the command line.
    ("sdk", "cli"),
]


def _unit(module: str) -> str:
    """The room or top-level module ``module`` belongs to (``__init__``: ``memtap`` itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _room(module: str) -> str | None:
    """The room (subpackage) of ``module``, ``None`` for a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else None


def upward_imports(graph: dict[str, set[str]], floors: list[tuple[str, ...]]) -> list[str]:
    """Every import chain in ``graph`` that leaves its module's unit for one on the same floor
    or higher, followed transitively from each module (a chain is reported where it first
    steps up, as ``a imports b imports c``). A unit with no floor is reported too."""
    level = {unit: i for i, floor in enumerate(floors) for unit in floor}
    found = [f"{module} is on no floor" for module in sorted(graph) if _unit(module) not in level]
    for start in sorted(graph):
        home = _unit(start)
        if home not in level:
            continue
        parent: dict[str, str | None] = {start: None}
        todo = deque([start])
        while todo:
            module = todo.popleft()
            for target in sorted(graph.get(module, ())):
                if target in parent:
                    continue
                parent[target] = module
                unit = _unit(target)
                if unit == home or level.get(unit, -1) < level[home]:
                    todo.append(target)
                    continue
                chain: list[str] = [target]
                while (step := parent[chain[-1]]) is not None:
                    chain.append(step)
                found.append(" imports ".join(reversed(chain)))
    return found


def test_every_unit_has_a_floor_and_every_floor_names_a_unit() -> None:
    units = {_unit(m) for m in import_graph()}
    placed = [unit for floor in FLOORS for unit in floor]
    assert len(placed) == len(set(placed)), "a unit on two floors"
    assert units <= set(placed), f"on no floor: {sorted(units - set(placed))}"
    assert set(placed) <= units, f"no such room or module: {sorted(set(placed) - units)}"


def test_no_import_runs_up_a_floor() -> None:
    """Read from every import statement of every module, followed transitively: no room or
    top-level module reaches one on its own floor or above."""
    upward = upward_imports(import_graph(), FLOORS)
    assert not upward, "\n".join(upward)


def test_the_floor_check_sees_an_upward_import_through_a_top_level_module() -> None:
    """Planted: ``plugins.py`` (a top-level module low in the house) imports the composition
    root, as it once imported the built-ins. The check reports the planted arrow, and the
    chains through it from the rooms below (capture reaches memory through plugins)."""
    graph = {module: set(targets) for module, targets in import_graph().items()}
    assert upward_imports(graph, FLOORS) == []
    source = "from memtap.memory import plugin_manager\nfrom memtap import hookspecs\n"
    graph["memtap.plugins"] |= module_imports(source, "memtap.plugins", False, graph)
    upward = upward_imports(graph, FLOORS)
    assert "memtap.plugins imports memtap.memory" in upward
    assert "memtap.capture.durability imports memtap.plugins imports memtap.memory" in upward
    # A chain that climbs only past a top-level module: each step down but the last.
    synthetic = {
        "memtap.adapters.tracked": {"memtap.request.tap"},
        "memtap.request.tap": {"memtap.telemetry"},
        "memtap.telemetry": {"memtap.longterm.recall"},
        "memtap.longterm.recall": set(),
    }
    assert upward_imports(synthetic, FLOORS) == [
        "memtap.adapters.tracked imports memtap.request.tap imports memtap.telemetry"
        " imports memtap.longterm.recall",
        "memtap.request.tap imports memtap.telemetry imports memtap.longterm.recall",
        "memtap.telemetry imports memtap.longterm.recall",
    ]
    # A module beside another on its floor is not below it; a unit with no floor is reported.
    assert upward_imports({"memtap.sdk": {"memtap.cli.main"}, "memtap.cli.main": set()}, FLOORS) == [
        "memtap.sdk imports memtap.cli.main"
    ]
    assert upward_imports({"memtap.newcomer": set()}, FLOORS) == ["memtap.newcomer is on no floor"]


def test_contracts_import_nothing_of_memtap_but_contracts() -> None:
    """``protocol/`` is the leaf of the leaves: it imports no other memtap module."""
    graph = import_graph()
    for module in sorted(m for m in graph if _room(m) == "protocol"):
        outside = {t for t in graph[module] if _room(t) != "protocol"}
        assert not outside, f"{module} imports {sorted(outside)}"
