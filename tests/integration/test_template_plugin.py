"""The plugin template installed as an outside package would be: copied out of the repo,
pip-installed into a fresh virtualenv with memtap-core, listed by ``memtap plugins`` and
passing its own tests (memtap's provider conformance suite) there.

Slow (a virtualenv and two wheel builds, about a minute); pip may fetch pytest, httpx and
the build backend from the package index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "plugins" / "_template"

pytestmark = pytest.mark.slow


def _run(
    *args: str | Path, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "MEMTAP_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of the template, installed with memtap-core into a new virtualenv."""
    base = tmp_path_factory.mktemp("template")
    plugin = base / "memtap-acme"
    shutil.copytree(
        TEMPLATE, plugin, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    )
    venv = base / "venv"
    _run(sys.executable, "-m", "venv", venv)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    _run(bindir / "python", "-m", "pip", "install", "-q", ROOT / "core", f"{plugin}[test]")
    return bindir, plugin


def test_the_installed_template_is_listed_by_memtap_plugins(installed: tuple[Path, Path]) -> None:
    bindir, _plugin = installed
    listing = json.loads(_run(bindir / "memtap", "plugins", "--json").stdout)
    (acme,) = [p for p in listing if p["name"] == "acme"]
    assert acme["distribution"] == "memtap-acme" and acme["version"] == "0.1.0"
    assert sorted(acme["hooks"]) == ["memtap_match_client", "memtap_wire_protocols"]
    assert not acme.get("builtin")


def test_the_installed_template_passes_its_conformance_tests(installed: tuple[Path, Path]) -> None:
    bindir, plugin = installed
    result = _run(bindir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", cwd=plugin)
    assert " passed" in result.stdout and "skipped" not in result.stdout and "failed" not in result.stdout
    assert (
        "TestAcmeConformance"
        in _run(
            bindir / "python", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", cwd=plugin
        ).stdout
    )
