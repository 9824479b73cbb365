"""`python -m memtap.testing.server`: the scripted model as a fake for user code, printing its
base URL, answering the real SDKs without a key, and stopping cleanly on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

import anthropic
import openai


def test_python_m_prints_its_base_url_and_serves_the_real_sdks_until_sigterm():
    server = subprocess.Popen(
        [sys.executable, "-m", "memtap.testing.server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:"), base_url
        chat = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-fake", max_retries=0)
        reply = chat.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "You said: hi"
        claude = anthropic.Anthropic(base_url=base_url, api_key="sk-fake", max_retries=0)
        message = claude.messages.create(
            model="any", max_tokens=10, messages=[{"role": "user", "content": "hello"}]
        )
        assert message.content[0].text == "You said: hello"  # type: ignore[union-attr]
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
