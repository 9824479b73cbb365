"""What a fresh interpreter has imported after some code: a plugin's module is imported by
every ``Memory`` and by every ``memtap`` command (to list the plugins' commands), so what it
imports at module level, every one of them pays for. A test names the heavy modules that
must wait until they are used::

    assert imported_after("import memtap; memtap.Memory('memory://').close()",
                          ["uvicorn", "memtap_acme.server"]) == []
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
