"""Run a page's Python blocks as a reader pastes them: in one fresh interpreter, one after
the other, in one namespace (a page's blocks continue each other, as in the quick start).

Usage: ``python run_python.py BLOCKS.json``, the file holding ``[{"label", "path", "line",
"code"}, ...]``. Each block is compiled under its Markdown file's path, its lines numbered as
in the file, so a traceback points at the line of the page. Before each block this prints
``\\x1e`` + its label on a line of its own, and after the last one ``\\x1e<end>``: the test
reads from them which blocks ran, and what each printed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SEPARATOR = "\x1e"


def main(blocks_file: str) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in json.loads(Path(blocks_file).read_text()):
        print(SEPARATOR + block["label"], flush=True)
        source = "\n" * (block["line"] - 1) + block["code"]
        exec(compile(source, block["path"], "exec"), namespace)
        sys.stdout.flush()
    print(SEPARATOR + "<end>", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
