"""Core imports no plugin or contrib package: plugins build on core, never the reverse.

Every import statement of every module under ``core/src/memtap`` counts, wherever it
stands (module level, inside a function, under ``if TYPE_CHECKING:``), and so do
``importlib.import_module("...")`` / ``__import__("...")`` calls with a literal name.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core" / "src" / "memtap"


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``tree`` (relative imports are
    core's own and left out)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
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


def is_plugin_module(name: str) -> bool:
    """A module of a plugin or contrib distribution (``memtap_<name>``)."""
    return name.split(".", 1)[0].startswith("memtap_")


def plugin_imports(source: str, filename: str = "<test>") -> list[str]:
    """Every import of a plugin or contrib module in ``source``, as ``line: module``."""
    tree = ast.parse(source, filename)
    return [f"{line}: {name}" for line, name in imported_modules(tree) if is_plugin_module(name)]


def test_the_check_sees_imports_wherever_they_stand():
    source = """
from typing import TYPE_CHECKING
import memtap_openai
from memtap_proxy.cli import proxy
from memtap import hookimpl
from . import model
if TYPE_CHECKING:
    from memtap_anthropic.messages import read_message
def late():
    import memtap_agents.profiles as profiles
    importlib.import_module("memtap_duckdb")
    __import__("memtap_postgres.store")
    importlib.import_module("memtap.model")
"""
    assert plugin_imports(source) == [
        "3: memtap_openai",
        "4: memtap_proxy.cli",
        "8: memtap_anthropic.messages",
        "10: memtap_agents.profiles",
        "11: memtap_duckdb",
        "12: memtap_postgres.store",
    ]


def test_core_imports_no_plugin_or_contrib_package():
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 20  # the walk found core
    offenders = [
        f"{path.relative_to(CORE.parent)}:{hit}"
        for path in files
        for hit in plugin_imports(path.read_text(encoding="utf-8"), str(path))
    ]
    assert offenders == [], "core must not import plugin or contrib packages: " + ", ".join(offenders)


def test_every_dependency_core_declares_is_imported_by_core():
    """A dependency core never imports is weight every user installs for nothing."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((CORE.parents[1] / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    imported = {
        name.split(".", 1)[0]
        for path in CORE.rglob("*.py")
        for _, name in imported_modules(ast.parse(path.read_text(encoding="utf-8")))
    }
    providers = importlib.metadata.packages_distributions()
    used = {dist.lower() for module in imported for dist in providers.get(module, ())}
    assert sorted(declared - used) == []
