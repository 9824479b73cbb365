"""The storage compliance suite against core's reference in-memory store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memtap.storage.store import InMemoryStore, Store
from memtap.testing.storage_suite import PERSISTENCE, StoreComplianceSuite


class TestInMemoryStoreCompliance(StoreComplianceSuite):
    """InMemoryStore keeps nothing across processes, so it has no persistence tests."""

    capabilities = StoreComplianceSuite.capabilities - {PERSISTENCE}

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        s = InMemoryStore()
        yield s
        s.close()
