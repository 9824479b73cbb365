"""Every Python and shell block of README.md and docs/ runs as a reader pastes it.

A page's Python blocks run in one fresh interpreter, in order, in one namespace (a quick
start continues from block to block); then its shell blocks run, in order, with ``bash -e``
in the same directory and environment. Nothing is added to the code: the environment points
the SDKs at memtap's scripted model server (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL`` and
fake keys, as a reader's own settings would point them at the provider), ``MEMTAP_HOME`` is a
fresh folder, and the PostgreSQL server the docs name is the test server. The only blocks
not run here carry a visible marker in the page (see ``doc_blocks``), and are parsed all the
same. What users came to see is checked on the wire: history injected, the remembered fact
in the request's memory block.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from doc_blocks import DATA_LANGUAGES, PAGES, ROOT, RUN_KINDS, Block, blocks, every_block
from run_python import SEPARATOR

import memtap
from memtap.testing.server import RecordedRequest, ScriptedModelServer

RUNNER = Path(__file__).with_name("run_python.py")

#: The PostgreSQL store the docs name, replaced by a fresh schema on the test server.
DOC_POSTGRES = "postgresql://app@db/memtap"
POSTGRES_ENV = "MEMTAP_TEST_POSTGRES_URL"
#: Where the proxy recipes are run (docs/proxy.md's ``<!-- recipe: NAME/PART -->`` blocks).
RECIPE_TESTS = [
    ROOT / "tests" / "contrib" / "proxy" / "test_proxy_recipes.py",
    ROOT / "tests" / "agents" / "test_recipes.py",
    ROOT / "tests" / "agents" / "test_mcp_recipes.py",  # docs/mcp.md's
]
#: The default recall budget's min_score: what scores under it is not injected.
MIN_SCORE = memtap.RecallBudget().min_score
#: How long one page's blocks may take (a cold MiniLM model loads in a few seconds).
PAGE_TIMEOUT = 300


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


RUN_PAGES = [p for p in PAGES if any(b.runs_here for b in blocks(p))]


# -- every block is accounted for -------------------------------------------------------------


@pytest.mark.parametrize("block", every_block(), ids=lambda b: b.label)
def test_every_block_says_its_language(block: Block) -> None:
    """A fence without a language (or an indented code block) could be a program nobody runs."""
    assert block.language in {*RUN_KINDS, *DATA_LANGUAGES}, (
        f"{block.label}: a fenced block needs a language: one of {sorted(RUN_KINDS)} (run by "
        f"this suite) or {sorted(DATA_LANGUAGES)}"
    )


@pytest.mark.parametrize("block", [b for b in every_block() if b.marker == "not-run"], ids=lambda b: b.label)
def test_a_block_not_run_says_why_and_still_parses(block: Block) -> None:
    assert block.kind is not None, (
        f"{block.label}: only programs are run; a {block.language} block needs no marker"
    )
    assert len(block.note.split()) >= 3, f"{block.label}: `<!-- not-run: ... -->` must say why"
    if block.kind == "python":
        compile(block.code, block.label, "exec")
    else:
        done = subprocess.run(
            ["bash", "-n"], input=block.commands(), capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{block.label}: {done.stderr}"
    for folder in re.findall(r"pip install ((?:\./[\w/.-]*\s*)+)", block.code):
        for path in folder.split():  # a clone's folders: each one a distribution
            assert (ROOT / path / "pyproject.toml").exists(), f"{block.label}: {path} is no package folder"


@pytest.mark.parametrize("block", [b for b in every_block() if b.marker == "recipe"], ids=lambda b: b.label)
def test_a_recipe_block_is_run_by_the_recipe_tests(block: Block) -> None:
    name, _, part = block.note.partition("/")
    assert rel(block.page) in {"docs/proxy.md", "docs/mcp.md"} and part, block.label
    assert any(f'"{name}"' in test.read_text() for test in RECIPE_TESTS), (
        f"{block.label}: no recipe test runs recipe {name!r}"
    )


@pytest.mark.parametrize(
    "block", [b for b in every_block() if b.language in {"toml", "json"}], ids=lambda b: b.label
)
def test_a_configuration_block_parses(block: Block) -> None:
    if block.language == "toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # tomli, in every test session's dependencies on Python 3.10
            import tomli as tomllib
        tomllib.loads(block.code)
    else:
        json.loads(block.code)


def test_the_pages_are_found() -> None:
    names = {rel(p) for p in PAGES}
    assert {"README.md", "docs/quickstart.md", "docs/integrations/langchain.md"} <= names
    assert {rel(p) for p in RUN_PAGES} >= {"README.md", "docs/quickstart.md", "docs/hooks.md"}


# -- running a page ----------------------------------------------------------------------------


@dataclass
class PageRun:
    """What one page's blocks did: what each printed, and what reached the model server."""

    outputs: dict[str, str] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)

    def chat_requests(self) -> list[dict[str, object]]:
        return [r.json for r in self.requests if r.path == "/v1/chat/completions"]


def reader_env(server: ScriptedModelServer, home: Path) -> dict[str, str]:
    """A reader's environment: their provider settings point at the scripted server, and
    memtap's settings are the defaults (``MEMTAP_HOME`` a fresh folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMTAP_", "OPENAI_", "ANTHROPIC_"))}
    env.update(
        OPENAI_BASE_URL=server.openai_base_url,
        OPENAI_API_KEY="sk-docs-test-0000000000000000",
        ANTHROPIC_BASE_URL=server.anthropic_base_url,
        ANTHROPIC_API_KEY="sk-ant-docs-test-0000000000000000",
        MEMTAP_HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def postgres_store(tmp_path: Path) -> Iterator[str]:
    """The store the docs' PostgreSQL URL stands for: a fresh schema on the test server, or,
    without one, a DuckDB file (said in a warning)."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        warnings.warn(
            f"{POSTGRES_ENV} is not set: the docs' {DOC_POSTGRES} is a DuckDB file in this run",
            stacklevel=1,
        )
        yield f"duckdb:///{tmp_path / 'postgres-stand-in.duckdb'}"
        return
    schema = f"memtap_docs_{uuid.uuid4().hex[:12]}"
    yield f"{base}{'&' if '?' in base else '?'}schema={schema}"
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def localise(code: str, postgres: str) -> str:
    """``code`` with the docs' PostgreSQL server replaced by the test's."""
    return code.replace(DOC_POSTGRES, postgres)


def run_page(page: Path, server: ScriptedModelServer, work: Path, postgres: str) -> PageRun:
    """Run the page's blocks as pasted; fail on the first block that fails, naming it."""
    todo = [b for b in blocks(page) if b.runs_here]
    python = [b for b in todo if b.kind == "python"]
    shell = [b for b in todo if b.kind != "python"]
    assert todo == python + shell, (
        f"{rel(page)}: a shell block before a Python block; the suite runs a page's Python, "
        "then its shell blocks: keep that order in the page or run them in separate pages"
    )
    home = work / "memtap-home"
    env = reader_env(server, home)
    run = PageRun()
    if python:
        spec = work / "blocks.json"
        spec.write_text(
            json.dumps(
                [
                    {
                        "label": b.label,
                        "path": str(b.page),
                        "line": b.line,
                        "code": localise(b.code, postgres),
                    }
                    for b in python
                ]
            )
        )
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(spec)],
            cwd=work, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT, check=False,
        )  # fmt: skip
        parts = done.stdout.split(SEPARATOR)[1:]
        outputs = dict(part.split("\n", 1) if "\n" in part else (part, "") for part in parts)
        ran = [label for label in outputs if label != "<end>"]
        assert done.returncode == 0 and "<end>" in outputs, (
            f"{ran[-1] if ran else rel(page)} failed as pasted:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        )
        run.outputs.update((label, outputs[label]) for label in ran)
    for block in shell:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", localise(block.commands(), postgres)],
            cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=PAGE_TIMEOUT, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"{block.label} failed as pasted:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        run.outputs[block.label] = done.stdout + done.stderr
    assert list(run.outputs) == [b.label for b in todo], "every block of the page runs, in order"
    run.requests = list(server.requests)
    return run


# -- what each page shows ---------------------------------------------------------------------


def _texts(body: object) -> list[str]:
    """Every message's text of a Chat Completions body, in order."""
    assert isinstance(body, dict)
    return [
        m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]) for m in body["messages"]
    ]


def _printed(run: PageRun, text: str) -> str:
    """What the block that printed ``text`` printed."""
    for output in run.outputs.values():
        if text in output:
            return output
    raise AssertionError(f"no block printed {text!r}: {run.outputs}")


def check_readme(run: PageRun) -> None:
    first, second = run.chat_requests()
    assert _texts(first) == ["I live in Tokyo."]
    said = _texts(second)
    assert said[0] == "I live in Tokyo." and said[-1] == "Where do I live?"  # history injected
    _printed(run, "user: I live in Tokyo.")


def check_quickstart(run: PageRun) -> None:
    recalled = re.search(r"^(\d\.\d\d) Alice is allergic to peanuts$", _printed(run, "peanuts"), re.M)
    assert recalled and float(recalled[1]) >= MIN_SCORE, (
        "mem.recall(...) prints the fact, scored to be injected"
    )
    memory = [
        text
        for body in run.chat_requests()
        for text in _texts(body)
        if "<memtap-memory>" in text and "Alice is allergic to peanuts" in text
    ]
    assert memory, "the recall example's call carries the remembered fact in its memory block"
    moved = _printed(run, "imported")  # memtap export, then memtap import: all of it moves
    exported = re.search(r"exported (\d+) exchange\(s\) and (\d+) fact\(s\)", moved)
    imported = re.search(r"imported (\d+) new exchange\(s\) and (\d+) new fact\(s\)", moved)
    assert exported and imported, moved
    assert exported.groups() == imported.groups(), moved
    # Everything the page stored is alice's, and "Reading memory back" forgets her: nothing
    # may be left (episodes once held for their following turns came back after a forget).
    assert exported.groups() == ("0", "0"), moved


def check_langchain(run: PageRun) -> None:
    said = [text for body in run.chat_requests() for text in _texts(body)]
    assert "I adopted a beagle called Mochi." in said
    assert "I live in Kyoto" in said


def check_explain(run: PageRun) -> None:
    recalled = _printed(run, "recall: 0 turn(s), 1 fact(s)")
    scored = re.search(r"^  (\d\.\d\d) Alice is allergic to peanuts \(words [\d.]+, vector ", recalled, re.M)
    assert scored and float(scored[1]) >= MIN_SCORE, recalled
    assert "history: 2 turn(s), 0 fact(s)" in recalled  # the first call's turns, injected
    assert "calls of session dinner" in _printed(run, "calls of session dinner")
    assert re.search(r"\['[0-9a-f]{32}'\]", _printed(run, "']")), "the JSON names the injected fact by id"


CHECKS: dict[str, Callable[[PageRun], None]] = {
    "docs/explain.md": check_explain,
    "README.md": check_readme,
    "docs/quickstart.md": check_quickstart,
    "docs/integrations/langchain.md": check_langchain,
}


@pytest.mark.parametrize("page", RUN_PAGES, ids=rel)
def test_the_page_runs_as_pasted(
    page: Path, memtap_server: ScriptedModelServer, tmp_path: Path, postgres_store: str
) -> None:
    run = run_page(page, memtap_server, tmp_path, postgres_store)
    check = CHECKS.get(rel(page))
    if check is not None:
        check(run)


def test_the_checks_name_pages_that_run() -> None:
    assert set(CHECKS) <= {rel(p) for p in RUN_PAGES}
    assert shutil.which("bash"), "the shell blocks run with bash"
