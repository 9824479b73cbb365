"""Driving the real agents (Claude Code, Codex CLI, Gemini CLI) through the memtap proxy.

The agents are npm packages installed at pinned versions by ``nox -s agents`` (which sets
:data:`BIN_ENV` to the directory holding their ``claude``, ``codex`` and ``gemini`` commands). Each run
gets a throwaway home and config directory, a dummy API key, every telemetry and
non-essential traffic switch off, and an outbound proxy that does not exist
(``127.0.0.1:9``): anything an agent tries beyond loopback fails at once instead of
hanging the tests. Loopback (the memtap proxy) is reached directly (``NO_PROXY``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import pytest

import memtap

#: The agents' npm packages, at the versions the tests are written against.
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code@2.1.332"
CODEX_PACKAGE = "@openai/codex@0.171.0"
GEMINI_CLI_PACKAGE = "@google/gemini-cli@0.61.0"
#: Where ``claude`` and ``codex`` are (set by ``nox -s agents``).
BIN_ENV = "MEMTAP_AGENTS_BIN"
#: Seconds one agent command may take (a real run takes 1-3 s here).
RUN_TIMEOUT = 120

#: Every switch that keeps an agent from reaching anything but its base URL.
QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_COST_WARNINGS": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CODEX_DISABLE_ANALYTICS": "1",
    "GEMINI_TELEMETRY_ENABLED": "false",
    "NO_COLOR": "1",
    # Nothing beyond loopback: an unreachable outbound proxy fails every other host fast.
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost,::1",
}


def agent_binary(name: str) -> Path:
    """The installed ``claude`` or ``codex`` command (the test is skipped, saying how to
    get it, when the agents are not installed)."""
    folder = os.environ.get(BIN_ENV)
    if not folder:
        pytest.skip(f"the real agents are not installed here: run `nox -s agents` (or set {BIN_ENV})")
    path = Path(folder) / name
    if not path.exists():
        pytest.fail(f"{BIN_ENV}={folder} has no {name!r}: reinstall with `nox -s agents`")
    return path


@attrs.frozen
class Run:
    """One finished agent command."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Run:
        """This run, or a failure showing what the agent printed."""
        assert self.returncode == 0, (
            f"{' '.join(self.args)} exited {self.returncode}:\n{self.stdout}\n{self.stderr}"
        )
        return self


def _run(args: list[str], env: dict[str, str], cwd: Path) -> Run:
    done = subprocess.run(
        args,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    return Run(tuple(args), done.returncode, done.stdout, done.stderr)


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: a throwaway home, the system's PATH, nothing of the caller's."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **QUIET}


class ClaudeCode:
    """``claude -p`` with a throwaway ``CLAUDE_CONFIG_DIR``, pointed at ``base_url``."""

    def __init__(self, binary: Path, home: Path, workdir: Path, base_url: str) -> None:
        self.binary = binary
        self.home = home
        self.workdir = workdir
        self.base_url = base_url

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of one run (the docs' recipe: ``ANTHROPIC_BASE_URL``)."""
        return {
            **base_env(self.home),
            "CLAUDE_CONFIG_DIR": str(self.home / ".claude"),
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-dummy-key",
            **extra,
        }

    def prompt(self, *args: str, **extra: str) -> Run:
        """``claude -p --output-format json <args>``: its JSON result names the session."""
        return _run(
            [str(self.binary), "-p", "--output-format", "json", *args], self.env(**extra), self.workdir
        )


def result_of(run: Run) -> dict[str, object]:
    """The JSON result ``claude -p --output-format json`` prints."""
    data = json.loads(run.check().stdout)
    assert isinstance(data, dict)
    return data


CODEX_CONFIG = """\
model = "gpt-5-codex"
model_provider = "memtap"

[model_providers.memtap]
name = "memtap proxy"
base_url = "{base_url}/v1"
env_key = "MEMTAP_CODEX_KEY"
wire_api = "responses"
"""


class Codex:
    """``codex exec`` with a throwaway ``CODEX_HOME`` whose ``config.toml`` makes the
    memtap proxy its model provider (Codex ignores ``OPENAI_BASE_URL``)."""

    def __init__(self, binary: Path, home: Path, workdir: Path, base_url: str) -> None:
        self.binary = binary
        self.home = home
        self.workdir = workdir
        self.codex_home = home / ".codex"
        self.codex_home.mkdir(parents=True, exist_ok=True)
        (self.codex_home / "config.toml").write_text(CODEX_CONFIG.format(base_url=base_url))

    def env(self) -> dict[str, str]:
        """The environment of one run."""
        return {
            **base_env(self.home),
            "CODEX_HOME": str(self.codex_home),
            "MEMTAP_CODEX_KEY": "sk-test-dummy-key",
        }

    def exec(self, *args: str) -> Run:
        """``codex exec --skip-git-repo-check <args>``."""
        return _run([str(self.binary), "exec", "--skip-git-repo-check", *args], self.env(), self.workdir)


_SESSION_LINE = re.compile(r"^session id: (\S+)$", re.M)


def codex_session(run: Run) -> str:
    """The session id ``codex exec`` prints."""
    found = _SESSION_LINE.search(run.stderr + run.stdout)
    assert found, f"no session id in codex's output:\n{run.stdout}\n{run.stderr}"
    return found.group(1)


MEMORY = re.compile(r"<memtap-memory>.*?</memtap-memory>", re.S)


def memory_blocks(body: dict[str, Any]) -> str:
    """memtap's memory blocks in a request, as one text."""
    return "\n".join(MEMORY.findall(json.dumps(body, ensure_ascii=False)))


def assert_no_scaffolding(mem: memtap.Memory, markers: Iterable[str]) -> None:
    """No stored fact holds any of the agent's scaffolding ``markers``."""
    for fact in mem.facts(entity_id="default"):
        assert not any(marker in fact.text for marker in markers), fact.text


#: Gemini CLI's user settings: the API key as its credentials (what ``/auth`` would save),
#: no usage statistics, no update check.
GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
#: The model ``gemini -m`` names in the tests: a named model skips Gemini CLI's model
#: router (a side call of its own, tested on its own).
GEMINI_MODEL = "gemini-2.5-flash"


class GeminiCli:
    """``gemini -p`` with a throwaway home whose ``~/.gemini/settings.json`` picks the API
    key, pointed at ``base_url`` (``GOOGLE_GEMINI_BASE_URL``), the workspace trusted."""

    def __init__(self, binary: Path, home: Path, workdir: Path, base_url: str) -> None:
        self.binary = binary
        self.home = home
        self.workdir = workdir
        self.base_url = base_url
        settings = home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(GEMINI_SETTINGS, indent=1))

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of one run (the docs' recipe)."""
        return {
            **base_env(self.home),
            "GOOGLE_GEMINI_BASE_URL": self.base_url,
            "GEMINI_API_KEY": "gemini-test-dummy-key",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            **extra,
        }

    def prompt(self, *args: str, model: str | None = GEMINI_MODEL, **extra: str) -> Run:
        """``gemini -p <prompt> --output-format json [-m model] <args>``, ``extra`` added to
        its environment: its JSON result names Gemini CLI's own session. ``model=None`` lets
        Gemini CLI route the prompt."""
        chosen = ["-m", model] if model else []
        command = [str(self.binary), "--output-format", "json", *chosen, "-p", *args]
        return _run(command, self.env(**extra), self.workdir)


def gemini_result(run: Run) -> dict[str, Any]:
    """The JSON result ``gemini --output-format json`` prints."""
    data = json.loads(run.check().stdout)
    assert isinstance(data, dict)
    return data
