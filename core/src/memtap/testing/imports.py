"""What a fresh interpreter has imported after some code: a plugin's module is imported by
every ``Memory`` and by every ``memtap`` command (to list the plugins' commands), so what it
imports at module level, every one of them pays for. A test names the heavy modules that
must wait until they are used::

    assert imported_after("import memtap; memtap.Memory('memory://').close()",
                          ["uvicorn", "memtap_acme.server"]) == []

A plugin that adds a command (``memtap_cli_commands``) is imported by every ``memtap``
command too (click lists the plugins' commands to resolve any one of them): its command's
module is, what runs it is not (:func:`imported_by_the_command_line`)::

    assert imported_by_the_command_line(["memtap_acme.cli", "uvicorn"]) == ["memtap_acme.cli"]
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable


def imported_after(code: str, modules: Iterable[str], *, timeout: float = 120.0) -> list[str]:
    """Which of ``modules`` are imported once ``code`` has run in a new interpreter (this
    one's executable and environment), sorted. Raises :class:`AssertionError` with the
    child's error output when ``code`` fails."""
    names = sorted(set(modules))
    script = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {names!r} if m in sys.modules]))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"the code failed (exit {done.returncode}):\n{done.stderr}")
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def imported_by_the_command_line(modules: Iterable[str], args: Iterable[str] = ("--help",)) -> list[str]:
    """Which of ``modules`` are imported once ``memtap`` has run with ``args`` (by default
    ``--help``, which lists every plugin's command) in a new interpreter, sorted. Raises
    :class:`AssertionError` when the command fails."""
    code = (
        "from click.testing import CliRunner\n"
        "from memtap.cli.main import main\n"
        f"result = CliRunner().invoke(main, {list(args)!r})\n"
        "assert result.exit_code == 0, result.output\n"
    )
    return imported_after(code, modules)
