"""Every hook is documented in docs/hooks.md with its exact signature, and tested."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from memtap import hookspecs

ROOT = Path(__file__).resolve().parents[2]
HOOKS = sorted(name for name in dir(hookspecs) if name.startswith("memtap_"))


def signature(name: str) -> str:
    sig = inspect.signature(getattr(hookspecs, name))
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {name}({params}) -> {sig.return_annotation}"


def test_there_are_hooks_in_all_five_families():
    assert len(HOOKS) >= 5


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_documented_with_its_exact_signature(name):
    docs = (ROOT / "docs" / "hooks.md").read_text()
    assert f"### `{name}`" in docs, f"docs/hooks.md has no section for {name}"
    assert signature(name) in docs, f"docs/hooks.md must show: {signature(name)}"


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_exercised_by_a_test(name):
    this = Path(__file__).resolve()
    tests = [p for p in (ROOT / "tests").rglob("test_*.py") if p.resolve() != this]
    assert any(name in p.read_text() for p in tests), f"no test names the hook {name}"
