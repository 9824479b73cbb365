"""One cache directory for this session's quick query table (never the user's own)."""

from __future__ import annotations

import pytest

from memtap_minilm import cache


@pytest.fixture(scope="session", autouse=True)
def quick_table_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    directory = tmp_path_factory.mktemp("memtap-cache")
    mp.setenv(cache.CACHE_ENV, str(directory))
    yield directory
    mp.undo()
