"""Tests never write outside their temporary homes: the whole run gets its own
``$MEMTAP_HOME`` (a test that opens a store or a spool without one of its own writes there),
and the run fails if the real memtap home gained a file meanwhile.

The short fixture names the tests use are memtap's pytest plugin's
(:mod:`memtap.testing.pytest_plugin`): ``server``, ``store`` and ``mem`` are
``memtap_server``, ``memtap_store`` and ``memtap_memory`` (a folder's conftest sets
``memtap_plugins`` to the plugin it tests)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import memtap
from memtap.storage.store import InMemoryStore
from memtap.testing.server import ScriptedModelServer

#: The memtap home of whoever runs the tests (what ``memtap.memory.memtap_home`` would be).
REAL_HOME = Path(os.environ.get("MEMTAP_HOME") or Path.home() / ".local" / "share" / "memtap").expanduser()


def _files(home: Path) -> set[str]:
    """Every path under ``home``, relative to it (folders included: an empty spool folder
    is a leak too)."""
    if not home.is_dir():
        return set()
    return {str(path.relative_to(home)) for path in home.rglob("*")}


_BEFORE = _files(REAL_HOME)
_RUN_HOME = tempfile.mkdtemp(prefix="memtap-tests-home-")
os.environ["MEMTAP_HOME"] = _RUN_HOME


#: Set (to anything) where other memtap processes share the real home while the tests run
#: (their writes would be counted as the tests'): the check is skipped, the isolation stays.
SHARED_HOME_ENV = "MEMTAP_TESTS_SHARED_REAL_HOME"


@pytest.fixture(scope="session", autouse=True)
def _the_real_home_gains_no_file() -> Iterator[None]:
    yield
    shutil.rmtree(_RUN_HOME, ignore_errors=True)
    if os.environ.get(SHARED_HOME_ENV):
        return
    gained = sorted(_files(REAL_HOME) - _BEFORE)
    assert not gained, (
        f"the tests wrote into the real memtap home {REAL_HOME}: {gained[:10]} "
        f"({len(gained)} in all); give the test its own MEMTAP_HOME (tmp_path). (Other memtap "
        f"processes writing there meanwhile count too: where they share it, set {SHARED_HOME_ENV}=1.)"
    )


@pytest.fixture
def server(memtap_server: ScriptedModelServer) -> ScriptedModelServer:
    """The scripted model server (shared by the run, emptied for each test)."""
    return memtap_server


@pytest.fixture
def store(memtap_store: InMemoryStore) -> InMemoryStore:
    """A fresh in-process store."""
    return memtap_store


@pytest.fixture
def mem(memtap_memory: memtap.Memory) -> memtap.Memory:
    """A Memory on ``store`` with the folder's ``memtap_plugins``, no entry points loaded."""
    return memtap_memory
