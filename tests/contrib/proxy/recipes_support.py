"""Running the recipes of docs/proxy.md as they are written.

A recipe is a set of fenced blocks, each after a ``<!-- recipe: NAME/PART -->`` comment:
``proxy`` (the ``memtap proxy`` command), ``client`` (a shell script or a Python program),
``config`` (a file the client reads). The only changes made to them: the real provider's URL
becomes the local scripted upstream's, and the proxy's port (8096) a free one (the proxy gets
it from ``MEMTAP_PROXY_PORT``, the variable its ``--port`` reads).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import memtap

DOC = Path(__file__).parents[3] / "docs" / "proxy.md"
DOC_PORT = "8096"
PROVIDERS = (
    "https://api.anthropic.com",
    "https://api.openai.com",
    "https://generativelanguage.googleapis.com",
)
_RECIPE = re.compile(r"<!-- recipe: ([\w-]+)/(\w+) -->\n```(\w+)\n(.*?)```", re.S)


def recipe(name: str) -> dict[str, tuple[str, str]]:
    """The parts of recipe ``name``: part -> (language, code)."""
    found = {part: (lang, code) for n, part, lang, code in _RECIPE.findall(DOC.read_text()) if n == name}
    assert found, f"docs/proxy.md has no recipe {name!r}"
    return found


def localise(code: str, port: int, upstream: str) -> str:
    """``code`` pointed at the local proxy port and scripted upstream."""
    for url in PROVIDERS:
        code = code.replace(url, upstream)
    return code.replace(DOC_PORT, str(port))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DocumentedProxy:
    """The recipe's ``memtap proxy`` command, run as written (its own process), with its
    store under ``home`` (``MEMTAP_HOME``)."""

    def __init__(self, name: str, upstream: str, home: Path) -> None:
        _, code = recipe(name)["proxy"]
        (line,) = [ln for ln in code.splitlines() if ln.strip()]
        args = shlex.split(localise(line, 0, upstream))
        assert args[:2] == ["memtap", "proxy"], line
        executable = shutil.which("memtap", path=str(Path(sys.executable).parent)) or shutil.which("memtap")
        assert executable, "the memtap command is not installed"
        self.port = free_port()
        self.home = home
        self.env = {**os.environ, "MEMTAP_HOME": str(home), "MEMTAP_PROXY_PORT": str(self.port)}
        self.env.pop("MEMTAP_STORE", None)
        self.args = [executable, *args[1:]]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def store_url(self) -> str:
        return f"duckdb:///{self.home / 'memtap.duckdb'}"

    def __enter__(self) -> DocumentedProxy:
        self.process = subprocess.Popen(
            self.args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    output = self.process.stdout.read().decode() if self.process.stdout else ""
                    raise RuntimeError(f"memtap proxy did not start:\n{output}") from None
                time.sleep(0.1)

    def stop(self) -> str:
        """Stop the proxy (SIGTERM, as a terminal's Ctrl-C would) and return its output."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            out, _ = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        return out.decode() if out else ""

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def memory(self) -> memtap.Memory:
        """The proxy's store, once it has stopped."""
        return memtap.Memory(self.store_url)
