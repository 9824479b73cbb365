from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_support import fill

import memtap


@pytest.fixture(scope="session")
def filled_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB file filled once per run (see ui_support.fill); tests use copies."""
    path = tmp_path_factory.mktemp("ui-store") / "filled.duckdb"
    fill(f"duckdb:///{path}")
    return path


@pytest.fixture
def store_url(filled_file: Path, tmp_path: Path) -> str:
    """A fresh copy of the filled store, for one test to read and change."""
    path = tmp_path / "memtap.duckdb"
    shutil.copyfile(filled_file, path)
    return f"duckdb:///{path}"


# Own mem: on the DuckDB file the UI under test reads.
@pytest.fixture
def mem(store_url: str) -> Iterator[memtap.Memory]:
    memory = memtap.Memory(store_url, spool=False, embedder=False)
    yield memory
    memory.close()
