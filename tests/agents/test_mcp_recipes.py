"""The recipes of docs/mcp.md, run as written with the real agents: Claude Code adds
`memtap mcp` (stdio, and streamable HTTP with a token) and its health check connects to it;
Codex reads the documented `[mcp_servers.memtap]` table as that very command, which serves
the four tools to the MCP client SDK."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import anyio
from agents_support import RUN_TIMEOUT, agent_binary, base_env
from mcp import Client, StdioServerParameters

import memtap

DOC = Path(__file__).parents[2] / "docs" / "mcp.md"
DOC_PORT = "8848"
_RECIPE = re.compile(r"<!-- recipe: ([\w-]+)/(\w+) -->\n```(\w+)\n(.*?)```", re.S)


def recipe(name: str) -> dict[str, tuple[str, str]]:
    """The parts of recipe ``name`` in docs/mcp.md: part -> (language, code)."""
    found = {part: (lang, code) for n, part, lang, code in _RECIPE.findall(DOC.read_text()) if n == name}
    assert found, f"docs/mcp.md has no recipe {name!r}"
    return found


def agent_env(home: Path, *agents: str) -> dict[str, str]:
    """A throwaway home, the agents and this interpreter's `memtap` on PATH."""
    folders = [str(agent_binary(a).parent) for a in agents] + [str(Path(sys.executable).parent)]
    return {**base_env(home), "PATH": os.pathsep.join([*folders, os.environ["PATH"]])}


def bash(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=3 * RUN_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{code}\n{done.stdout}\n{done.stderr}"
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_claude_code_starts_memtap_mcp_over_stdio(tmp_path: Path, workdir: Path) -> None:
    language, code = recipe("mcp-claude-code")["stdio"]
    assert language == "bash"
    home = tmp_path / "home"
    home.mkdir()
    done = bash(code, agent_env(home, "claude"), workdir)
    assert re.search(
        r"^memtap: memtap mcp --store duckdb:///\S+ --entity alice - ✔ Connected$", done.stdout, re.M
    ), done.stdout


def test_claude_code_connects_to_memtap_mcp_over_http_with_the_token(tmp_path: Path, workdir: Path) -> None:
    parts = recipe("mcp-claude-code")
    (_, server), (_, client) = parts["server"], parts["client"]
    port = str(free_port())
    lines = [ln for ln in server.replace(DOC_PORT, port).splitlines() if ln.strip()]
    assert lines[-1].startswith("memtap mcp --http"), lines
    wrong = client.replace(DOC_PORT, port).replace(
        "add --transport http memtap ", "add --transport http bad "
    )
    wrong = wrong.replace("$MEMTAP_MCP_TOKEN", "not-the-token").replace("claude mcp list", "")
    script = "\n".join(
        [
            *lines[:-1],
            lines[-1] + " &",
            # wait until it listens (bash's /dev/tcp)
            f"for i in $(seq 1200); do (: >/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done",
            wrong,
            client.replace(DOC_PORT, port),
            "kill %1; wait || true",
        ]
    )
    home = tmp_path / "home"
    home.mkdir()
    done = bash(script, agent_env(home, "claude"), workdir)
    assert re.search(rf"^memtap: http://127.0.0.1:{port}/mcp \(HTTP\) - ✔ Connected$", done.stdout, re.M), (
        done.stdout
    )
    refused = re.search(r"^bad: .* - ✘ Failed to connect.*401", done.stdout, re.M)
    assert refused, done.stdout
    token = re.search(r"tok-[0-9a-f]{32}", json.dumps(json.loads((home / ".claude.json").read_text())))
    assert token and token.group(0) not in done.stdout + done.stderr  # never echoed back


def test_codex_reads_the_documented_table_as_the_command_that_serves_the_tools(
    tmp_path: Path, workdir: Path
) -> None:
    language, config = recipe("mcp-codex")["config"]
    assert language == "toml"
    home = tmp_path / "home"
    store = tmp_path / "memtap.duckdb"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(config.replace("/home/me/memtap.duckdb", str(store)))
    env = agent_env(home, "codex")
    done = bash("codex mcp get memtap --json", env, workdir)
    seen = json.loads(done.stdout[done.stdout.index("{") :])
    transport = seen["transport"]
    assert seen["enabled"] and transport["type"] == "stdio"
    assert transport["command"] == "memtap"
    assert transport["args"] == ["mcp", "--store", f"duckdb:///{store}", "--entity", "alice"]

    mem = memtap.Memory(f"duckdb:///{store}")
    fact = mem.remember("Alice's cat is called Miso", entity_id="alice")
    mem.close()

    async def main() -> None:
        params = StdioServerParameters(command=transport["command"], args=transport["args"], env=env)
        async with Client(params) as client:
            assert {t.name for t in (await client.list_tools()).tools} == {
                "remember",
                "recall",
                "forget",
                "history",
            }
            found = await client.call_tool("recall", {"query": "what is the cat called?"})
            assert [f["fact_id"] for f in found.structured_content["facts"]][:1] == [fact.id]

    anyio.run(main)
