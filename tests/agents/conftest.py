from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "contrib" / "proxy"))  # recipes_support

from agents_support import Agent, Aider, ClaudeCode, Codex, GeminiCli, Opencode, QwenCode

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


# Own mem: on a DuckDB file, with the agent profiles and every provider.
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


def _agent(kind: type[Agent]) -> Any:
    """The fixture of one installed agent, pointed at the proxy, with a home of its own."""

    @pytest.fixture
    def fixture(tmp_path: Path, workdir: Path, proxy: ProxyThread) -> Agent:
        return kind.installed(tmp_path / "home", workdir, proxy.url)

    return fixture


claude = _agent(ClaudeCode)
codex = _agent(Codex)
gemini = _agent(GeminiCli)
qwen = _agent(QwenCode)
opencode = _agent(Opencode)
aider = _agent(Aider)
