"""Finding every import statement of a source file (the import-rule tests share it).

Counted wherever they stand: module level, inside functions and methods, under ``if
TYPE_CHECKING:``, and ``importlib.import_module("...")`` / ``__import__("...")`` calls with a
literal name. Relative imports are left out (they name the file's own package).
"""

from __future__ import annotations

import ast
from collections.abc import Collection


def absolute_imports(
    source: str, filename: str = "<test>", *, submodules_of: str = "", submodules: Collection[str] = ()
) -> list[tuple[int, str]]:
    """``(line, module)`` of every absolute import in ``source``. ``from <submodules_of>
    import <name>`` also counts as importing ``<submodules_of>.<name>`` when ``name`` is
    one of ``submodules`` (``from memtap import request`` imports ``memtap.request``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if submodules_of and node.module == submodules_of:
                found.extend(
                    (node.lineno, f"{submodules_of}.{alias.name}")
                    for alias in node.names
                    if alias.name in submodules
                )
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                found.append((node.lineno, first.value))
    return found
