"""The agents' recipes of docs/proxy.md, run as written: the documented `memtap proxy`
command in its own process, then the documented shell commands (with the real `claude`,
`codex` and `gemini` on PATH) and the documented config files (Codex's, Gemini CLI's)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from agents_support import RUN_TIMEOUT, agent_binary, base_env
from recipes_support import DocumentedProxy, localise, recipe

from memtap.testing.server import Reply, ScriptedModelServer

MEMORY = re.compile(r"<memtap-memory>.*?</memtap-memory>", re.S)


def run_script(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
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


def test_the_claude_code_recipe(upstream: ScriptedModelServer, tmp_path: Path, workdir: Path) -> None:
    folder = agent_binary("claude").parent
    upstream.script(Reply(text="Noted: teal."), Reply(text="Teal."))
    language, code = recipe("claude-code")["client"]
    assert language == "bash"
    home = tmp_path / "home"
    with DocumentedProxy("claude-code", upstream.base_url, tmp_path / "memtap") as proxy:
        env = {**base_env(home), "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
        env["ANTHROPIC_API_KEY"] = "sk-ant-test-dummy-key"
        done = run_script(localise(code, proxy.port, upstream.base_url), env, workdir)
    assert done.stdout.splitlines()[-2:] == ["Noted: teal.", "Teal."]
    first, second = [r.json for r in upstream.requests if r.path == "/v1/messages"]
    assert "My favourite colour is teal." in json.dumps(first["messages"])
    said = json.dumps(second["messages"])
    assert "My favourite colour is teal." not in MEMORY.sub("", said)  # a new session...
    assert "My favourite colour is teal." in "".join(MEMORY.findall(said))  # ... that recalls it
    with proxy.memory() as mem:
        sessions = mem.sessions(entity_id="default")
        assert len(sessions) == 2  # ... each its own
        assert "My favourite colour is teal." in [f.text for f in mem.facts(entity_id="default")]


def test_the_codex_recipe(upstream: ScriptedModelServer, tmp_path: Path, workdir: Path) -> None:
    folder = agent_binary("codex").parent
    upstream.script(Reply(text="Noted: teal."), Reply(text="Teal."))
    parts = recipe("codex")
    (config_language, config), (language, code) = parts["config"], parts["client"]
    assert (config_language, language) == ("toml", "bash")
    home = tmp_path / "home"
    with DocumentedProxy("codex", upstream.base_url, tmp_path / "memtap") as proxy:
        (home / ".codex").mkdir(parents=True)
        (home / ".codex" / "config.toml").write_text(localise(config, proxy.port, upstream.base_url))
        env = {**base_env(home), "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
        env["OPENAI_API_KEY"] = "sk-test-dummy-key"
        run_script(localise(code, proxy.port, upstream.base_url), env, workdir)
    first, second = [r.json for r in upstream.requests if r.path == "/v1/responses"]
    assert second["prompt_cache_key"] == first["prompt_cache_key"]  # the same Codex thread
    texts = [json.dumps(i) for i in second["input"]]
    assert sum("My favourite colour is teal." in t for t in texts) == 1  # resumed: carried once
    with proxy.memory() as mem:
        (session,) = mem.sessions(entity_id="default")
        users = [m.content for m in mem.history(session.session_id) if m.role == "user"]
        assert users == ["My favourite colour is teal.", "And what is it?"]


def test_the_gemini_cli_recipe(upstream: ScriptedModelServer, tmp_path: Path, workdir: Path) -> None:
    folder = agent_binary("gemini").parent
    routed = '{"complexity_reasoning": "Simple.", "complexity_score": 10}'
    # With no model named, Gemini CLI asks its model router first (a side call) every prompt.
    upstream.script(Reply(text=routed), Reply(text="Noted: teal."), Reply(text=routed), Reply(text="Teal."))
    parts = recipe("gemini-cli")
    (config_language, config), (language, code) = parts["config"], parts["client"]
    assert (config_language, language) == ("json", "bash")
    home = tmp_path / "home"
    with DocumentedProxy("gemini-cli", upstream.base_url, tmp_path / "memtap") as proxy:
        (home / ".gemini").mkdir(parents=True)
        (home / ".gemini" / "settings.json").write_text(config)
        env = {**base_env(home), "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
        env["GEMINI_API_KEY"] = "gemini-test-dummy-key"
        done = run_script(localise(code, proxy.port, upstream.base_url), env, workdir)
    assert done.stdout.splitlines()[-2:] == ["Noted: teal.", "Teal."]
    turns = [r.json for r in upstream.requests if r.path.endswith(":streamGenerateContent")]
    assert len(turns) == 2
    assert "My favourite colour is teal." not in MEMORY.sub(
        "", json.dumps(turns[1]["contents"])
    )  # a new session
    with proxy.memory() as mem:
        sessions = mem.sessions(entity_id="default")
        assert len(sessions) == 2  # each its own; the router's side calls are in neither
        users = sorted(m.content for s in sessions for m in mem.history(s.session_id) if m.role == "user")
        assert users == ["My favourite colour is teal.", "What is my favourite colour?"]
        assert "My favourite colour is teal." in [f.text for f in mem.facts(entity_id="default")]
