"""Core imports no plugin or contrib package: plugins build on core, never the reverse.

Every import statement of every module under ``core/src/memtap`` counts, wherever it
stands (module level, inside a function, under ``if TYPE_CHECKING:``), and so do
``importlib.import_module("...")`` / ``__import__("...")`` calls with a literal name.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

from import_support import absolute_imports

CORE = Path(__file__).resolve().parents[2] / "core" / "src" / "memtap"


def is_plugin_module(name: str) -> bool:
    """A module of a plugin or contrib distribution (``memtap_<name>``)."""
    return name.split(".", 1)[0].startswith("memtap_")


def plugin_imports(source: str, filename: str = "<test>") -> list[str]:
    """Every import of a plugin or contrib module in ``source``, as ``line: module``."""
    return [f"{line}: {name}" for line, name in absolute_imports(source, filename) if is_plugin_module(name)]


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
    importlib.import_module("memtap.protocol.model")
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


def _packages_distributions() -> dict[str, set[str]]:
    """Which distributions provide each top-level module: ``packages_distributions()``, and
    the top-level names of each distribution's files (Python 3.10 reads only ``top_level.txt``,
    which wheels built by today's backends no longer have; 3.11 reads both)."""
    found: dict[str, set[str]] = {m: set(d) for m, d in importlib.metadata.packages_distributions().items()}
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            top = file.parts[0]
            if len(file.parts) > 1 or top.endswith(".py"):
                found.setdefault(top.removesuffix(".py"), set()).add(dist.metadata["Name"])
    return found


def test_every_dependency_core_declares_is_imported_by_core():
    """A dependency core never imports is weight every user installs for nothing."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # tomli, in every test session's dependencies on Python 3.10
        import tomli as tomllib
    project = tomllib.loads((CORE.parents[1] / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    imported = {
        name.split(".", 1)[0]
        for path in CORE.rglob("*.py")
        for _, name in absolute_imports(path.read_text(encoding="utf-8"), str(path))
    }
    providers = _packages_distributions()
    used = {dist.lower() for module in imported for dist in providers.get(module, ())}
    assert sorted(declared - used) == []


def test_the_namespace_shows_the_public_api_only():
    """``dir(memtap)`` lists ``__all__``, not the rooms (subpackages) importing it loaded."""
    import memtap

    assert dir(memtap) == sorted(memtap.__all__)
    assert all(getattr(memtap, name) is not None for name in memtap.__all__)
