"""Driving the real agents (Claude Code, Codex CLI, Gemini CLI, Qwen Code, opencode, aider)
through the memtap proxy.

The agents are npm packages (aider: a PyPI package in a Python 3.12 venv) installed at
pinned versions by ``nox -s agents``, which sets :data:`BIN_ENV` to the directory holding
their ``claude``, ``codex``, ``gemini``, ``qwen`` and ``opencode`` commands, and
:data:`AIDER_BIN_ENV` to the one holding ``aider``. Each run
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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import attrs
import pytest
from proxy_support import settle

import memtap

#: The agents' npm packages, at the versions the tests are written against.
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code@2.1.332"
CODEX_PACKAGE = "@openai/codex@0.171.0"
GEMINI_CLI_PACKAGE = "@google/gemini-cli@0.61.0"
QWEN_CODE_PACKAGE = "@qwen-code/qwen-code@0.24.4"
OPENCODE_PACKAGE = "opencode-ai@1.18.33"
AIDER_PACKAGE = "aider-chat==0.86.2"
#: Where ``claude``, ``codex``, ``gemini``, ``qwen`` and ``opencode`` are (set by ``nox -s agents``).
BIN_ENV = "MEMTAP_AGENTS_BIN"
#: Where ``aider`` is (its own Python 3.12 venv, set by ``nox -s agents``).
AIDER_BIN_ENV = "MEMTAP_AIDER_BIN"
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
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "NO_COLOR": "1",
    # Nothing beyond loopback: an unreachable outbound proxy fails every other host fast.
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost,::1",
}


def agent_binary(name: str, env: str = BIN_ENV) -> Path:
    """The installed agent command ``name`` in the folder ``env`` names (the test is
    skipped, saying how to get it, when the agents are not installed)."""
    folder = os.environ.get(env)
    if not folder:
        pytest.skip(f"the real agents are not installed here: run `nox -s agents` (or set {env})")
    path = Path(folder) / name
    if not path.exists():
        pytest.fail(f"{env}={folder} has no {name!r}: reinstall with `nox -s agents`")
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


_A = TypeVar("_A", bound="Agent")


class Agent:
    """One agent's command, run in ``workdir`` with a throwaway ``home`` (created), pointed
    at ``base_url`` (the memtap proxy, or a model server) as its recipe in ``docs/proxy.md``
    says. A subclass names its :attr:`command`, writes its configuration in
    :meth:`configure` and adds its variables in :meth:`recipe_env`."""

    #: The command's name, and the variable naming the folder it is installed in.
    command: ClassVar[str]
    folder_env: ClassVar[str] = BIN_ENV

    def __init__(self, binary: Path, home: Path, workdir: Path, base_url: str) -> None:
        self.binary = binary
        self.home = home
        self.workdir = workdir
        self.base_url = base_url
        home.mkdir(parents=True, exist_ok=True)
        self.configure()

    @classmethod
    def installed(cls: type[_A], home: Path, workdir: Path, base_url: str) -> _A:
        """The agent as ``nox -s agents`` installed it (skipped when it is not installed)."""
        return cls(agent_binary(cls.command, cls.folder_env), home, workdir, base_url)

    def configure(self) -> None:
        """Write the agent's configuration files (none by default)."""

    def recipe_env(self) -> dict[str, str]:
        """The variables the agent's recipe sets (none by default)."""
        return {}

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of one run: a clean one, the recipe's variables, ``extra``."""
        return {**base_env(self.home), **self.recipe_env(), **extra}

    def _run(self, args: Sequence[str], **extra: str) -> Run:
        """Run the agent's command with ``args`` (``extra`` added to its environment)."""
        return _run([str(self.binary), *args], self.env(**extra), self.workdir)


class ClaudeCode(Agent):
    """``claude -p`` with a throwaway ``CLAUDE_CONFIG_DIR``, pointed at ``base_url``."""

    command = "claude"

    def recipe_env(self) -> dict[str, str]:
        """The docs' recipe: ``ANTHROPIC_BASE_URL``."""
        return {
            "CLAUDE_CONFIG_DIR": str(self.home / ".claude"),
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-dummy-key",
        }

    def prompt(self, *args: str, **extra: str) -> Run:
        """``claude -p --output-format json <args>``: its JSON result names the session."""
        return self._run(["-p", "--output-format", "json", *args], **extra)


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


class Codex(Agent):
    """``codex exec`` with a throwaway ``CODEX_HOME`` whose ``config.toml`` makes the
    memtap proxy its model provider (Codex ignores ``OPENAI_BASE_URL``)."""

    command = "codex"

    @property
    def codex_home(self) -> Path:
        """Codex's configuration folder."""
        return self.home / ".codex"

    def configure(self) -> None:
        """``config.toml``: the memtap proxy as a model provider."""
        self.codex_home.mkdir(parents=True, exist_ok=True)
        (self.codex_home / "config.toml").write_text(CODEX_CONFIG.format(base_url=self.base_url))

    def recipe_env(self) -> dict[str, str]:
        """``CODEX_HOME`` and the provider's key."""
        return {"CODEX_HOME": str(self.codex_home), "MEMTAP_CODEX_KEY": "sk-test-dummy-key"}

    def exec(self, *args: str) -> Run:
        """``codex exec --skip-git-repo-check <args>``."""
        return self._run(["exec", "--skip-git-repo-check", *args])


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


class QwenCode(Agent):
    """``qwen -p`` with a throwaway home, pointed at ``base_url`` (the docs' recipe:
    ``OPENAI_BASE_URL`` and ``--auth-type openai``)."""

    command = "qwen"

    def recipe_env(self) -> dict[str, str]:
        """``OPENAI_BASE_URL``, a key and a model."""
        return {
            "OPENAI_BASE_URL": f"{self.base_url}/v1",
            "OPENAI_API_KEY": "sk-test-dummy-key",
            "OPENAI_MODEL": "gpt-4o",
        }

    def prompt(self, text: str, *args: str) -> Run:
        """``qwen --auth-type openai <args> -p <text>``."""
        return self._run(["--auth-type", "openai", *args, "-p", text])


OPENCODE_CONFIG = {
    "$schema": "https://opencode.ai/config.json",
    "provider": {
        "memtap": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "memtap proxy",
            "options": {"baseURL": "{base_url}/v1", "apiKey": "sk-test-dummy-key"},
            "models": {"gpt-4o": {"name": "gpt-4o"}},
        }
    },
    "model": "memtap/gpt-4o",
}


class Opencode(Agent):
    """``opencode run`` in a project whose ``opencode.json`` makes the memtap proxy its
    provider (``@ai-sdk/openai-compatible`` with ``options.baseURL``)."""

    command = "opencode"

    def configure(self) -> None:
        """The project's ``opencode.json``."""
        config = json.dumps(OPENCODE_CONFIG, indent=2).replace("{base_url}", self.base_url)
        (self.workdir / "opencode.json").write_text(config + "\n")

    def titles_from(self, url: str) -> None:
        """Ask the model server at ``url`` (not the proxy) for titles: opencode's
        ``small_model``, a provider of its own."""
        path = self.workdir / "opencode.json"
        config = json.loads(path.read_text())
        titles = dict(config["provider"]["memtap"], name="titles")
        titles["options"] = dict(titles["options"], baseURL=f"{url}/v1")
        config["provider"]["titles"] = titles
        config["small_model"] = "titles/gpt-4o"
        path.write_text(json.dumps(config, indent=2) + "\n")

    def run(self, *args: str) -> Run:
        """``opencode run <args>``."""
        return self._run(["run", *args])


#: aider's switches for a run without a terminal: no git, no update check, no analytics.
AIDER_FLAGS = (
    "--model",
    "openai/gpt-4o",
    "--no-git",
    "--yes-always",
    "--no-check-update",
    "--no-show-model-warnings",
    "--analytics-disable",
    "--no-pretty",
)


class Aider(Agent):
    """``aider --message`` with ``OPENAI_API_BASE`` pointed at ``base_url``."""

    command = "aider"
    folder_env = AIDER_BIN_ENV

    def recipe_env(self) -> dict[str, str]:
        """``OPENAI_API_BASE``, a key, and LiteLLM's model list read locally."""
        return {
            "OPENAI_API_BASE": f"{self.base_url}/v1",
            "OPENAI_API_KEY": "sk-test-dummy-key",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }

    def message(self, text: str, *args: str) -> Run:
        """``aider <flags> <args> --message <text>``."""
        return self._run([*AIDER_FLAGS, *args, "--message", text])


def assert_nothing_stored_holds(mem: memtap.Memory, markers: Iterable[str]) -> None:
    """Neither a stored fact nor a stored message of any session holds one of the agent's
    scaffolding ``markers``."""
    markers = tuple(markers)
    assert_no_scaffolding(mem, markers)
    for s in mem.sessions(entity_id="default"):
        for m in mem.history(s.session_id):
            assert not any(marker in m.content for marker in markers), m.content


#: What the Chat Completions agents' tests type (Qwen Code, opencode, aider): a first
#: session's statement, a second session's question and its follow-up (continued).
TOLD = "My favourite colour is teal, and my dog is called Biscuit."
ASKED = "What is the capital of France?"
FOLLOW_UP = "What did I ask you?"


def assert_sessions_apart(mem: memtap.Memory) -> None:
    """:data:`TOLD` stored alone in a session of its own, and :data:`ASKED` with its
    :data:`FOLLOW_UP` (the continued or restored chat) in another."""
    first = only_session_with(mem, TOLD)
    second = only_session_with(mem, ASKED)
    assert first != second
    assert typed_turns(mem, first) == [TOLD]
    assert typed_turns(mem, second) == [ASKED, FOLLOW_UP]


def assert_status_answered(run: Run, upstream: Any, profile: Any) -> None:
    """``mem:status`` answered by the proxy in the agent's output (its profile named); the
    model never saw it."""
    assert "memtap proxy: store duckdb:" in run.stdout
    assert f"agent profile {profile.name}" in run.stdout
    assert chat_requests(upstream, profile) == []


#: The tool loop the agents' tests script: the model asks to read notes.txt, then answers.
READ_NOTES = "Read notes.txt and tell me what it says."
NOTES_ANSWER = "It says the deploy key rotates on Fridays."
NOTES_CALL_ID = "call_read_notes"


def assert_notes_loop_stored(run: Run, upstream: Any, profile: Any, mem: memtap.Memory) -> None:
    """The :data:`READ_NOTES` tool loop of a Chat Completions agent completed: the file's
    text went back to the model as the call's result, and the session's stored history is
    the user's turn, the call, its result and the answer, paired by the call's id."""
    assert "Fridays" in run.stdout
    requests = chat_requests(upstream, profile)
    assert len(requests) == 2
    result = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert result and result[0]["tool_call_id"] == NOTES_CALL_ID
    assert "rotates on Fridays" in json.dumps(result[0]["content"])

    settle(mem, 2)
    history = mem.history(only_session_with(mem, READ_NOTES))
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].tool_calls[0].id == NOTES_CALL_ID
    assert history[2].tool_call_id == NOTES_CALL_ID
    assert history[3].content == NOTES_ANSWER


def chat_requests(upstream: Any, profile: Any) -> list[dict[str, Any]]:
    """The Chat Completions bodies the upstream got from an agent's conversation, in order
    (``profile``'s side calls left out: titles, memory extraction...)."""
    from memtap.sdk import RequestView

    out = []
    for r in upstream.requests:
        if r.method != "POST" or r.path != "/v1/chat/completions":
            continue
        body = r.json
        system = "\n".join(
            m["content"] for m in body["messages"] if m["role"] == "system" and isinstance(m["content"], str)
        )
        if not profile.side_call(RequestView(system=system, messages=())):
            out.append(body)
    return out


def typed_turns(mem: memtap.Memory, session_id: str) -> list[str]:
    """The user turns stored in a session."""
    return [m.content for m in mem.history(session_id) if m.role == "user"]


def only_session_with(mem: memtap.Memory, text: str) -> str:
    """The one stored session whose user turns hold ``text``."""
    sessions = [s.session_id for s in mem.sessions(entity_id="default")]
    found = [s for s in sessions if text in typed_turns(mem, s)]
    assert len(found) == 1, [(s, typed_turns(mem, s)) for s in sessions]
    return found[0]


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


class GeminiCli(Agent):
    """``gemini -p`` with a throwaway home whose ``~/.gemini/settings.json`` picks the API
    key, pointed at ``base_url`` (``GOOGLE_GEMINI_BASE_URL``), the workspace trusted."""

    command = "gemini"

    def configure(self) -> None:
        """``~/.gemini/settings.json``: the API key as its credentials."""
        settings = self.home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(GEMINI_SETTINGS, indent=1))

    def recipe_env(self) -> dict[str, str]:
        """The docs' recipe."""
        return {
            "GOOGLE_GEMINI_BASE_URL": self.base_url,
            "GEMINI_API_KEY": "gemini-test-dummy-key",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }

    def prompt(self, *args: str, model: str | None = GEMINI_MODEL, **extra: str) -> Run:
        """``gemini -p <prompt> --output-format json [-m model] <args>``, ``extra`` added to
        its environment: its JSON result names Gemini CLI's own session. ``model=None`` lets
        Gemini CLI route the prompt."""
        chosen = ["-m", model] if model else []
        return self._run(["--output-format", "json", *chosen, "-p", *args], **extra)


def gemini_result(run: Run) -> dict[str, Any]:
    """The JSON result ``gemini --output-format json`` prints."""
    data = json.loads(run.check().stdout)
    assert isinstance(data, dict)
    return data
