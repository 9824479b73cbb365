from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

CORE_SRC = Path(__file__).resolve().parents[2] / "core" / "src"
HEAVY = (
    "openai",
    "anthropic",
    "litellm",
    "duckdb",
    "google.genai",
    "boto3",
    "botocore",
    "psycopg",
    "psycopg2",
)

PROBE = """
import json, sys
import {module}
heavy = {heavy!r}
loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
print(json.dumps(loaded))
"""


def loaded_modules(module: str, heavy: Sequence[str] = HEAVY) -> list[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CORE_SRC), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module, heavy=tuple(heavy))],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["memtap", "memtap.testing.pytest_plugin"])
def test_import_does_not_load_provider_sdks_or_drivers(module):
    assert loaded_modules(module) == []


def test_probe_reports_modules_that_are_loaded():
    found = loaded_modules("memtap", heavy=("memtap.memory", "json"))
    assert {"json", "memtap.memory"} <= set(found)
