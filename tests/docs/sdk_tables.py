"""docs/plugin-authoring.md's tables of SDK names, generated from each SDK module's ``__all__``.

Each of ``memtap.sdk``, ``memtap.sdk.storage`` and ``memtap.sdk.server`` lists its names in
``__all__`` under ``# group`` comments; the page has one table per module between
``<!-- sdk-names: MODULE -->`` and ``<!-- /sdk-names -->``, one row per group.
``tests/docs/test_sdk_tables.py`` fails when a table differs from what this module makes of
``__all__``; to regenerate them::

    python tests/docs/sdk_tables.py
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "plugin-authoring.md"
MODULES = ("memtap.sdk", "memtap.sdk.storage", "memtap.sdk.server")
_TABLE = re.compile(r"(<!-- sdk-names: (?P<module>[\w.]+) -->\n)(?P<table>.*?)(<!-- /sdk-names -->)", re.S)


def groups(module: str) -> list[tuple[str, list[str]]]:
    """``(group, names)`` in the order of the module's ``__all__`` and its ``# group`` comments."""
    mod = importlib.import_module(module)
    source = Path(mod.__file__ or "").read_text(encoding="utf-8")
    body = source.split("\n__all__ = [", 1)[1].split("\n]", 1)[0]
    found: list[tuple[str, list[str]]] = []
    for line in body.splitlines()[1:]:
        line = line.strip()
        if line.startswith("#"):
            found.append((line.lstrip("# "), []))
        elif line.startswith('"'):
            if not found:
                raise ValueError(f"{module}.__all__: {line} comes before any `# group` comment")
            found[-1][1].append(line.strip('",'))
    listed = [name for _, names in found for name in names]
    if listed != list(mod.__all__):
        raise ValueError(f"{module}.__all__ could not be read from its source")
    return found


def table(module: str) -> str:
    """The Markdown table of ``module``'s names, one row per group."""
    rows = [f"| {group} | {', '.join(f'`{n}`' for n in names)} |" for group, names in groups(module)]
    return "\n".join([f"| Group | `{module}` names |", "|---|---|", *rows]) + "\n"


def regenerate(text: str) -> str:
    """``text`` (the page) with every generated table made anew."""
    return _TABLE.sub(lambda m: m.group(1) + table(m.group("module")) + m.group(4), text)


def tables_in(text: str) -> list[str]:
    """The modules whose tables the page holds, in order."""
    return [m.group("module") for m in _TABLE.finditer(text)]


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = regenerate(text)
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
        print(f"rewrote the SDK tables of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
