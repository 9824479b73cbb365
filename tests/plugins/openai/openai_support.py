"""Shared values of the openai plugin tests (a uniquely named module: every test folder has
its own conftest.py, so `from conftest import ...` would be ambiguous in a full run)."""

from __future__ import annotations

API_KEY = "sk-test-0123456789abcdefghijklmnop"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
