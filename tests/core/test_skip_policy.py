"""A nox session fails on a skipped test it did not declare (tests/skip_policy.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from skip_policy import skipped_tests, undeclared_skips

TESTS = """
import pytest

def test_runs():
    pass

def test_skips_at_run_time():
    pytest.skip("no server here")

@pytest.mark.skipif(True, reason="not on this platform")
def test_skipped_by_a_marker():
    pass

@pytest.mark.xfail(strict=True, reason="a known miss: runs, and must fail")
def test_expected_to_fail():
    assert False


class TestSuite:
    def test_async(self):
        pytest.skip("the provider declares no support for: async")
"""


SKIPPED_WHOLE = 'import pytest\npytest.importorskip("no_such_module_here")\n\ndef test_x():\n    pass\n'
CLEAN = "def test_x():\n    pass\n"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One pytest run per example module (run at once: a pytest start costs seconds), each
    with its JUnit report."""
    folder = tmp_path_factory.mktemp("skips")
    # the folder is its own root (the temporary folder may be inside the repository: nox's)
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    runs = {}
    for name, source in {"example": TESTS, "skipped_whole": SKIPPED_WHOLE, "clean": CLEAN}.items():
        (folder / f"test_{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        junit = folder / f"{name}.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:memtap"]
        command += [f"--junitxml={junit}", f"test_{name}.py"]
        runs[name] = (junit, subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL))
    for _, process in runs.values():
        process.wait(timeout=300)
    return {name: junit for name, (junit, _) in runs.items()}


def test_an_undeclared_skip_fails_the_session(reports: dict[str, Path]) -> None:
    assert undeclared_skips(reports["example"], {}) == [
        "test_example::test_skips_at_run_time: no server here",
        "test_example::test_skipped_by_a_marker: not on this platform",
        "test_example.TestSuite::test_async: the provider declares no support for: async",
    ]


def test_a_declared_skip_does_not(reports: dict[str, Path]) -> None:
    declared = {"*.TestSuite::test_async": "boto3 has no asyncio client"}
    assert undeclared_skips(reports["example"], declared) == [
        "test_example::test_skips_at_run_time: no server here",
        "test_example::test_skipped_by_a_marker: not on this platform",
    ]
    everything = {**declared, "test_example::test_skip*": "x"}
    assert undeclared_skips(reports["example"], everything) == []


def test_a_module_skipped_whole_is_seen(reports: dict[str, Path]) -> None:
    found = skipped_tests(reports["skipped_whole"])
    assert len(found) == 1
    assert "no_such_module_here" in found[0][1]
    assert undeclared_skips(reports["skipped_whole"], {}) != []


def test_a_run_without_skips_passes(reports: dict[str, Path]) -> None:
    assert skipped_tests(reports["clean"]) == []
    assert undeclared_skips(reports["clean"], {}) == []
