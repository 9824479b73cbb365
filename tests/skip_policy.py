"""Which skipped tests a CI session allows: every nox session that runs tests fails on a
skip it did not declare (``noxfile.py``'s ``DECLARED_SKIPS``, each with its reason).

The session runs pytest with ``--junitxml``; :func:`undeclared_skips` reads that report.
Kept apart from the noxfile (plain Python, no nox) so that ``tests/core/test_skip_policy.py``
can show that an undeclared skip fails a session and a declared one does not.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from pathlib import Path
from xml.etree import ElementTree


def skipped_tests(junit: Path) -> list[tuple[str, str]]:
    """``(test id, message)`` of every skipped test in a pytest JUnit report. The id is the
    report's dotted class name and test name: ``tests.plugins.bedrock.test_x.TestSuite::test_y``
    (a module skipped whole at collection has the module's name on both sides). An expected
    failure (``xfail``), which the report also files under "skipped", is not a skip: it ran."""
    return [
        (f"{case.get('classname')}::{case.get('name')}", _message(skip))
        for case in ElementTree.parse(junit).iter("testcase")
        for skip in case.findall("skipped")
        if skip.get("type") != "pytest.xfail"
    ]


def _message(skip: ElementTree.Element) -> str:
    """The skip's reason: its ``message``, or for a module skipped at collection (whose
    message is only "collection skipped") the text pytest gives, which holds the reason."""
    message = skip.get("message") or ""
    if message == "collection skipped" and skip.text:
        return skip.text.strip()
    return message


def undeclared_skips(junit: Path, declared: Mapping[str, str]) -> list[str]:
    """Every skipped test of the report that no glob of ``declared`` (test id glob -> why it
    may skip) matches, as ``test id: skip message``: empty when the session may pass."""
    return [
        f"{test}: {message}"
        for test, message in skipped_tests(junit)
        if not any(fnmatch.fnmatchcase(test, pattern) for pattern in declared)
    ]
