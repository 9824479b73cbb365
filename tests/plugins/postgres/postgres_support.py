"""Helpers the PostgreSQL tests share (a module of its own: every test folder has a
conftest.py, so `from conftest import ...` would be ambiguous in a full run)."""

from __future__ import annotations


def with_schema(url: str, schema: str) -> str:
    """``url`` with its store in ``schema`` (the ``?schema=`` parameter)."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"
