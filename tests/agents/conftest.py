from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "contrib" / "proxy"))  # recipes_support

from agents_support import (
    AIDER_BIN_ENV,
    Aider,
    ClaudeCode,
    Codex,
    GeminiCli,
    Opencode,
    QwenCode,
    agent_binary,
)

import memtap
import memtap_agents
import memtap_anthropic
import memtap_duckdb
import memtap_google
import memtap_openai
from memtap.testing.server import ScriptedModelServer
from memtap_proxy import Proxy, ProxyConfig, ProxyThread


@pytest.fixture
def upstream() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[memtap.Memory]:
    memory = memtap.Memory(
        f"duckdb:///{tmp_path / 'memtap.duckdb'}",
        plugins=[memtap_openai, memtap_anthropic, memtap_google, memtap_agents, memtap_duckdb],
        entry_points=False,
    )
    yield memory
    memory.close()


@pytest.fixture
def proxy(upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[ProxyThread]:
    """The proxy as `memtap proxy` runs it, with no session or entity settings."""
    config = ProxyConfig(
        openai_upstream=upstream.base_url,
        anthropic_upstream=upstream.base_url,
        gemini_upstream=upstream.base_url,
    )
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    # A repository of its own, as a project is: agents look for the root of the repository
    # they run in (aider keeps its chat history there, even with --no-git), and nox's
    # temporary folders lie inside memtap's own clone.
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / "notes.txt").write_text("The deploy key rotates on Fridays.\n")
    (folder / "CLAUDE.md").write_text("Use pytest for tests.\n")
    (folder / "AGENTS.md").write_text("Use pytest for tests.\n")
    (folder / "GEMINI.md").write_text("Use pytest for tests.\n")
    return folder


@pytest.fixture
def claude(tmp_path: Path, workdir: Path, proxy: ProxyThread) -> ClaudeCode:
    return ClaudeCode(agent_binary("claude"), tmp_path / "home", workdir, proxy.url)


@pytest.fixture
def codex(tmp_path: Path, workdir: Path, proxy: ProxyThread) -> Codex:
    return Codex(agent_binary("codex"), tmp_path / "home", workdir, proxy.url)


@pytest.fixture
def gemini(tmp_path: Path, workdir: Path, proxy: ProxyThread) -> GeminiCli:
    return GeminiCli(agent_binary("gemini"), tmp_path / "home", workdir, proxy.url)


@pytest.fixture
def qwen(tmp_path: Path, workdir: Path, proxy: ProxyThread) -> QwenCode:
    return QwenCode(agent_binary("qwen"), tmp_path / "home", workdir, proxy.url)


@pytest.fixture
def opencode(tmp_path: Path, workdir: Path, proxy: ProxyThread) -> Opencode:
    return Opencode(agent_binary("opencode"), tmp_path / "home", workdir, proxy.url)


@pytest.fixture
def aider(tmp_path: Path, workdir: Path, proxy: ProxyThread) -> Aider:
    return Aider(agent_binary("aider", AIDER_BIN_ENV), tmp_path / "home", workdir, proxy.url)
