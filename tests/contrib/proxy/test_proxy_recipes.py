"""The SDK recipes of docs/proxy.md, run as written: the documented `memtap proxy` command in
its own process, the documented client program against it (the agents' recipes run in
tests/agents/test_recipes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from proxy_support import needs_anthropic
from recipes_support import DocumentedProxy, localise, recipe

from memtap.testing.server import Reply, ScriptedModelServer


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("openai-sdk", "/v1/chat/completions"),
        pytest.param("anthropic-sdk", "/v1/messages", marks=needs_anthropic),
    ],
)
def test_the_sdk_recipe_gets_memory(
    name: str, path: str, upstream: ScriptedModelServer, tmp_path: Path
) -> None:
    upstream.script(Reply(text="Noted."), Reply(text="In Lisbon."))
    language, code = recipe(name)["client"]
    assert language == "python"
    with DocumentedProxy(name, upstream.base_url, tmp_path / "home") as proxy:
        program = localise(code, proxy.port, upstream.base_url)
        env = {**os.environ, "OPENAI_API_KEY": "sk-test-key", "ANTHROPIC_API_KEY": "sk-ant-test-key"}
        done = subprocess.run(
            [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "In Lisbon."
    calls = [r.json for r in upstream.requests if r.path == path]
    assert len(calls) == 2
    second = [m["content"] for m in calls[1]["messages"]]
    assert second[:3] == ["I live in Lisbon.", "Noted.", "Where do I live?"]  # the session's history
    with proxy.memory() as mem:
        history = mem.history("support-chat", entity_id="alice")
        assert [m.content for m in history] == [
            "I live in Lisbon.",
            "Noted.",
            "Where do I live?",
            "In Lisbon.",
        ]
