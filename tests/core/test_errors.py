"""Every error memtap raises to its users is a ``memtap.MemtapError`` (one ``except`` catches
them all), and keeps the standard base it had (``except ValueError`` still works)."""

from __future__ import annotations

import pytest

import memtap
from memtap.cli.transfer import ExportFormatError
from memtap.longterm.memorize import MalformedOutputError
from memtap.longterm.remember_tool import MemoryToolError

ERRORS = [
    (memtap.StoreError, Exception),
    (memtap.UnknownStoreURLError, ValueError),
    (memtap.UnsupportedClientError, TypeError),
    (MemoryToolError, ValueError),
    (ExportFormatError, ValueError),
    (MalformedOutputError, ValueError),
]


@pytest.mark.parametrize(("error", "standard"), ERRORS, ids=[e.__name__ for e, _ in ERRORS])
def test_memtap_errors_share_one_base(error, standard):
    assert issubclass(error, memtap.MemtapError)
    assert issubclass(error, standard)


def test_a_store_error_is_caught_as_a_memtap_error():
    with pytest.raises(memtap.MemtapError, match="no installed memtap storage plugin accepts 'nosuch'"):
        memtap.Memory("nosuch://x", entry_points=False)


def test_storage_errors_are_the_same_classes_everywhere():
    from memtap import errors
    from memtap.storage import store as storage

    assert storage.StoreError is errors.StoreError is memtap.StoreError
    assert storage.UnknownStoreURLError is errors.UnknownStoreURLError is memtap.UnknownStoreURLError
