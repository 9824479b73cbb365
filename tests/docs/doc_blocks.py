"""The fenced code blocks of README.md and docs/, as a reader sees them.

Blocks are read with markdown-it-py (CommonMark, the parser behind rich's Markdown, so no new
dependency): a regular expression would miss fences inside list items, ``~~~`` fences and
fences indented under a bullet, and would read a fence inside another block as code.

A block may be preceded by a marker, an HTML comment on the line just before it:

- ``<!-- not-run: why -->``: the docs suite does not run it (it installs packages, starts a
  server that runs until stopped, needs your own machine...); it is still parsed
  (``compile`` for Python, ``bash -n`` for shell), and ``why`` must say why;
- ``<!-- recipe: NAME/PART -->``: a proxy recipe of docs/proxy.md, run by the recipe tests
  (tests/contrib/proxy/test_proxy_recipes.py, tests/agents/test_recipes.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
#: Every page of the documentation: the README, CONTRIBUTING and docs/ with its subfolders.
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Languages whose blocks are programs to run, and how: Python, or a shell.
RUN_KINDS = {
    "python": "python",
    "py": "python",
    "bash": "shell",
    "sh": "shell",
    "shell": "shell",
    "console": "console",
}
#: Languages of blocks that are not programs: configuration files and plain text (diagrams,
#: file trees, file formats).
DATA_LANGUAGES = {"toml", "json", "yaml", "text"}
_MARKER = re.compile(r"<!--\s*(not-run|recipe):\s*(.*?)\s*-->\s*$", re.S)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its code and its marker, if any."""

    page: Path
    line: int  # 1-based line of the block's first line of code
    language: str
    code: str
    marker: str | None = None  # "not-run" or "recipe"
    note: str = ""  # the marker's text: the reason, or the recipe's NAME/PART

    @property
    def label(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str | None:
        """``python``, ``shell``, ``console``, or ``None`` for a block that is not a program."""
        return RUN_KINDS.get(self.language)

    @property
    def runs_here(self) -> bool:
        """A program this suite runs: no marker sends it elsewhere."""
        return self.kind is not None and self.marker is None

    def commands(self) -> str:
        """The shell code of the block (a ``console`` block's ``$ `` lines; the rest is the
        output they print)."""
        if self.kind != "console":
            return self.code
        return "".join(line[2:] + "\n" for line in self.code.splitlines() if line.startswith("$ "))


@cache
def blocks(page: Path) -> tuple[Block, ...]:
    """The page's fenced blocks in order (indented code blocks are reported as language
    ``""``, so that the suite asks for a fence with a language)."""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    found = []
    for i, token in enumerate(tokens):
        if token.type not in ("fence", "code_block") or token.map is None:
            continue
        before = tokens[i - 1] if i else None
        marker = (
            _MARKER.match(before.content.strip())
            if before is not None and before.type == "html_block"
            else None
        )
        start = token.map[0] + (2 if token.type == "fence" else 1)
        found.append(
            Block(
                page=page,
                line=start,
                language=token.info.split()[0] if token.type == "fence" and token.info.strip() else "",
                code=token.content,
                marker=marker.group(1) if marker else None,
                note=" ".join(marker.group(2).split()) if marker else "",
            )
        )
    return tuple(found)


def every_block() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]
