"""memtap.testing.timing: one slack factor for every time bound, deadline polling."""

from __future__ import annotations

import threading

import pytest

from memtap.testing.timing import DEFAULT_SLACK, SLACK_ENV, eventually, slack, slack_factor, wait_for


def test_slack_scales_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SLACK_ENV, raising=False)
    assert slack_factor() == DEFAULT_SLACK >= 1
    monkeypatch.setenv(SLACK_ENV, "5")
    assert slack(0.5) == 2.5
    for bad in ("fast", "0", "-1"):
        monkeypatch.setenv(SLACK_ENV, bad)
        with pytest.raises(ValueError, match=SLACK_ENV):
            slack(1)


def test_eventually_returns_once_another_thread_made_it_true(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLACK_ENV, "1")
    done = threading.Event()
    threading.Timer(0.02, done.set).start()
    assert eventually(done.is_set, 5)
    assert not eventually(lambda: False, 0.02)


def test_wait_for_fails_the_test_naming_what_did_not_happen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLACK_ENV, "1")
    with pytest.raises(AssertionError, match=r"the cache warm did not hold within 0\.0 s"):
        wait_for(lambda: False, 0.01, what="the cache warm")
