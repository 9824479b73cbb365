"""Plugins and contrib packages import from core only ``memtap`` and ``memtap.sdk`` (with
its ``memtap.sdk.storage`` and ``memtap.sdk.server``).

Every import statement of every module under ``plugins/*/src`` (the template included) and
``contrib/*/src`` counts, wherever it stands (module level, inside a function, under
``if TYPE_CHECKING:``), and so do ``importlib.import_module("...")`` / ``__import__("...")``
calls with a literal name. ``from memtap import request`` imports the subpackage ``memtap.request``
and counts as such. ``memtap.testing`` is for plugins' tests, not their shipped code: no
plugin ships a test kit of its own today (the conformance suites live in core).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from import_support import absolute_imports

import memtap.sdk
import memtap.sdk.server
import memtap.sdk.storage

ROOT = Path(__file__).resolve().parents[2]
CORE = Path(memtap.__file__).resolve().parent
ALLOWED = frozenset({"memtap", "memtap.sdk", "memtap.sdk.storage", "memtap.sdk.server"})
#: The SDK's modules: the plugin SDK and, by audience, storage backends' and servers'.
SDK_MODULES = (memtap.sdk, memtap.sdk.storage, memtap.sdk.server)


def _core_submodules() -> frozenset[str]:
    """Core's top-level submodules and subpackages (``errors``, ``request``, ``testing``, ...)."""
    names = {p.stem for p in CORE.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in CORE.iterdir() if (p / "__init__.py").is_file()}
    return frozenset(names)


def core_imports(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """``(line, module)`` of every import of a ``memtap`` module in ``source``."""
    found = absolute_imports(source, filename, submodules_of="memtap", submodules=_core_submodules())
    return [(line, name) for line, name in found if name.split(".", 1)[0] == "memtap"]


def forbidden_imports(source: str, filename: str = "<test>") -> list[str]:
    """Every import in ``source`` of a core module beyond ``memtap`` and the SDK's modules."""
    return [f"{line}: {name}" for line, name in core_imports(source, filename) if name not in ALLOWED]


def plugin_sources() -> list[Path]:
    """Every shipped module of every plugin, the plugin template and every contrib package."""
    files: list[Path] = []
    for pattern in ("plugins/*/src", "contrib/*/src"):
        for src in sorted(ROOT.glob(pattern)):
            files.extend(sorted(src.rglob("*.py")))
    return files


def test_the_check_sees_imports_wherever_they_stand():
    source = """
from typing import TYPE_CHECKING
import memtap
import memtap.protocol.wire
from memtap import Memory, hookimpl
from memtap import request, sdk
from memtap.sdk import Call
from memtap.sdk.storage import Store
import memtap.sdk.server
from memtap.protocol.model import Message
from memtap_openai import chat
if TYPE_CHECKING:
    from memtap.storage.store import Store
def late():
    from memtap.testing.conformance import ProviderConformanceSuite
    importlib.import_module("memtap.formats.layout")
    __import__("memtap.sdk")
class Adapter:
    def install(self):
        import memtap.adapters.stainless as stainless
"""
    assert forbidden_imports(source) == [
        "4: memtap.protocol.wire",
        "6: memtap.request",
        "10: memtap.protocol.model",
        "13: memtap.storage.store",
        "15: memtap.testing.conformance",
        "16: memtap.formats.layout",
        "20: memtap.adapters.stainless",
    ]


def test_plugins_and_contrib_import_only_memtap_and_the_sdk():
    files = plugin_sources()
    names = {p.relative_to(ROOT).parts[:2] for p in files}
    # the walk found every plugin, the template and both contrib packages
    assert {
        ("plugins", "_template"),
        ("plugins", "_template_wire"),
        ("plugins", "openai"),
        ("contrib", "proxy"),
    } <= names
    assert len(names) >= 12
    offenders = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in files
        for hit in forbidden_imports(path.read_text(encoding="utf-8"), str(path))
    ]
    assert offenders == [], "import from memtap.sdk (or memtap) instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    ("module", "name"),
    [(module, name) for module in SDK_MODULES for name in module.__all__],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_every_sdk_name_resolves(module: object, name: str):
    assert getattr(module, name) is not None


@pytest.mark.parametrize("module", SDK_MODULES, ids=lambda m: m.__name__)
def test_each_sdk_module_lists_each_name_once_and_every_public_name(module: object):
    names = module.__all__
    assert len(names) == len(set(names))
    # (pytest's assertion rewriting may add "@py_builtins" and the like to the namespace)
    public = {n for n in vars(module) if n.isidentifier() and not n.startswith("_")}
    public -= {"annotations", "importlib", "warnings", "Any"}
    if module is memtap.sdk:
        public -= {"storage", "server"}  # the submodules themselves
    assert public == set(names)


def test_no_name_is_in_two_sdk_modules():
    seen = [name for module in SDK_MODULES for name in module.__all__]
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(
    ("home", "name"),
    [(home, name) for home in (memtap.sdk.storage, memtap.sdk.server) for name in home.__all__],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_a_moved_name_still_imports_from_the_sdk_with_a_warning_naming_its_home(home: object, name: str):
    assert name not in memtap.sdk.__all__
    with pytest.warns(DeprecationWarning, match=rf"memtap\.sdk\.{name} moved to {home.__name__}"):
        found = getattr(memtap.sdk, name)
    assert found is getattr(home, name)


def test_an_unknown_sdk_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        memtap.sdk.no_such_name  # noqa: B018


def test_the_sdk_names_are_core_objects_not_copies():
    # a re-export, never a wrapper: memtap.sdk.X is the object core itself uses
    assert memtap.sdk.Call is importlib.import_module("memtap.request.tap").Call
    assert memtap.sdk.hookimpl is memtap.hookimpl
    assert memtap.sdk.read_chat_message is importlib.import_module("memtap.formats.openai_chat").read_message
    assert memtap.sdk.storage.Store is importlib.import_module("memtap.storage.store").Store
    assert memtap.sdk.server.token_digest is importlib.import_module("memtap.tokens").digest
