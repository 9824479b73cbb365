"""The plugin templates installed as an outside package would be: each copied out of the
repo, pip-installed into a fresh virtualenv with memtap-core, listed by ``memtap plugins``
and passing its own tests (memtap's provider conformance suite) there. Both tiers:
``plugins/_template`` (an OpenAI-compatible SDK, at most 60 lines of code) and
``plugins/_template_wire`` (a wire format written out in full).

Slow (per template a virtualenv and two wheel builds, about a minute); pip may fetch
pytest, httpx and the build backend from the package index.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Template:
    """One template folder and what installing it must show."""

    folder: str
    distribution: str
    entry_point: str
    suite: str


TEMPLATES = [
    Template("_template", "memtap-acme", "acme", "TestAcmeConformance"),
    Template("_template_wire", "memtap-acme-wire", "acme_wire", "TestAcmeWireConformance"),
]
#: The short path's promise (docs/plugin-authoring.md): a plugin for an OpenAI-compatible
#: SDK in at most this many lines of code.
SHORT_TEMPLATE_LINES = 60

pytestmark = pytest.mark.slow


def lines_of_code(path: Path) -> int:
    """Lines of ``path`` holding code: not blank, not only a comment, not in a docstring."""
    source = path.read_text(encoding="utf-8")
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    code: set[int] = set()
    with path.open("rb") as f:
        for token in tokenize.tokenize(f.readline):
            if token.type not in skipped | {tokenize.ENCODING, tokenize.ENDMARKER}:
                code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstrings)


def test_lines_of_code_counts_neither_blanks_comments_nor_docstrings(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""Doc\n\nstring."""\n\n# a comment\nx = (\n    1  # one\n)\n\n\n'
        'def f():\n    """Doc."""\n    return """a\nb"""\n'
    )
    assert lines_of_code(module) == 6  # x = (, 1, ), def, return """a, b"""


def test_the_short_template_is_at_most_60_lines_of_code() -> None:
    sources = sorted((ROOT / "plugins" / "_template" / "src").rglob("*.py"))
    assert sources
    total = sum(lines_of_code(p) for p in sources)
    assert total <= SHORT_TEMPLATE_LINES, f"plugins/_template/src has {total} lines of code"


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


def test_the_guide_shows_the_short_template_as_it_is() -> None:
    """docs/plugin-authoring.md shows the whole plugin module (and its docs test runs it)."""
    source = (ROOT / "plugins" / "_template" / "src" / "memtap_acme" / "__init__.py").read_text()
    guide = (ROOT / "docs" / "plugin-authoring.md").read_text(encoding="utf-8")
    assert f"```python\n{source}```\n" in guide


@pytest.fixture(scope="module", params=TEMPLATES, ids=lambda t: t.folder)
def template(request: pytest.FixtureRequest) -> Template:
    """Each template in turn."""
    chosen: Template = request.param
    return chosen


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, template: Template) -> tuple[Path, Path]:
    """A copy of the template, installed with memtap-core into a new virtualenv."""
    base = tmp_path_factory.mktemp(template.folder)
    plugin = base / template.distribution
    shutil.copytree(
        ROOT / "plugins" / template.folder,
        plugin,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache"),
    )
    venv = base / "venv"
    _run(sys.executable, "-m", "venv", venv)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    _run(bindir / "python", "-m", "pip", "install", "-q", ROOT / "core", f"{plugin}[test]")
    return bindir, plugin


def test_the_installed_template_is_listed_by_memtap_plugins(
    installed: tuple[Path, Path], template: Template
) -> None:
    bindir, _plugin = installed
    listing = json.loads(_run(bindir / "memtap", "plugins", "--json").stdout)
    (acme,) = [p for p in listing if p["name"] == template.entry_point]
    assert acme["distribution"] == template.distribution and acme["version"] == "0.1.0"
    assert sorted(acme["hooks"]) == ["memtap_match_client", "memtap_wire_protocols"]
    assert not acme.get("builtin")


def test_the_installed_template_passes_its_conformance_tests(
    installed: tuple[Path, Path], template: Template
) -> None:
    bindir, plugin = installed
    result = _run(bindir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", cwd=plugin)
    assert " passed" in result.stdout and "skipped" not in result.stdout and "failed" not in result.stdout
    assert (
        template.suite
        in _run(
            bindir / "python", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", cwd=plugin
        ).stdout
    )
