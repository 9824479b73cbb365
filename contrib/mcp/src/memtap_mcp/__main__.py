"""``python -m memtap_mcp``: the same as ``memtap mcp``."""

from __future__ import annotations

from .cli import mcp

if __name__ == "__main__":
    mcp(prog_name="memtap mcp")
