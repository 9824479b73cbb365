"""The quick loop CONTRIBUTING.md documents leaves the ``slow`` tests out, as pasted."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick_loop() -> list[str]:
    """The first command of CONTRIBUTING.md's quick loop block, split as a shell would."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## The quick loop", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "the quick loop has no bash block"
    first = block.group(1).splitlines()[0]
    return shlex.split(first, comments=True)


def test_the_quick_loop_deselects_the_slow_tests(tmp_path: Path) -> None:
    command = _quick_loop()
    assert command[:3] == ["python", "-m", "pytest"], command
    assert "slow" in " ".join(command), f"the quick loop does not leave the slow tests out: {command}"
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import pytest\n\n\n@pytest.mark.slow\ndef test_slow():\n    pass\n\n\ndef test_quick():\n    pass\n"
    )
    # The documented options, on a probe file, under the repository's pytest configuration
    # (the marker must be registered: it runs with --strict-markers).
    options = [arg for arg in command[3:] if not arg.startswith("tests")]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *options,
            "-p",
            "no:cacheprovider",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(ROOT),
            str(probe),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 deselected" in done.stdout, done.stdout
