"""A process that exits while a memtap thread is inside a DuckDB statement ends normally.

A short script (register a client, make a call or only enter a scope, exit) starts loading
its entity's facts in memtap's index thread; when the interpreter exits during that read,
``Memory.close()`` closes the store under it, and the thread, back from DuckDB's C++ during
finalization, was ended there by CPython: DuckDB's cleanup swallowed the forced unwind and
the process aborted ("terminate called after throwing an instance of ''", "FATAL: exception
not rethrown", status 134) in 5 of 20 exits on a store of 6,000 facts. The store's
statements are now units of native work (``memtap.sdk.native_work``) that exit waits for.

Each case is a child that exits at a different instant of the load.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import textwrap

import pytest

from memtap.sdk import Fact
from memtap.testing.timing import slack
from memtap_duckdb.store import DuckDBStore

FACTS = 20_000

CHILD = textwrap.dedent(
    """
    import sys, time
    import memtap
    from memtap_duckdb.store import DuckDBStore

    mem = memtap.Memory(DuckDBStore(sys.argv[1]), entry_points=False)
    mem.longterm.engine.indexes.get("loading", wait=False)  # what a first call starts
    time.sleep(float(sys.argv[2]))
    print("exiting", flush=True)
    """
)


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("exit-mid-statement") / "facts.duckdb"
    store = DuckDBStore(path)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    store.add_facts(
        [
            Fact(
                entity_id="loading",
                text=f"fact {i}: my friend {i} likes hiking near town {i % 97} and the colour teal",
                created_at=start + dt.timedelta(minutes=i),
            )
            for i in range(FACTS)
        ]
    )
    store.close()
    return path


@pytest.mark.parametrize("instant", [0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 0.8])
def test_exit_during_the_index_load_ends_the_process_normally(big_store, tmp_path, instant):
    path = tmp_path / "facts.duckdb"
    shutil.copy(big_store, path)
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", CHILD, str(path), str(instant)],
        capture_output=True,
        text=True,
        timeout=slack(120),
    )
    assert done.returncode == 0, f"exit status {done.returncode}; stderr:\n{done.stderr[-3000:]}"
    assert done.stdout == "exiting\n"
    # Nothing on stderr: no abort, and no warning that the load failed because memtap closed.
    assert done.stderr == "", done.stderr[-3000:]
