"""Every page within a deadline: an entity id that contains ``/recall`` or ``/forget`` is
browsed as itself; the recall page on an entity of 20,000 facts imported a moment ago (no
vectors yet, a slow embedder) answers by words in under a second; a page whose work outlasts
the deadline answers 503 at the deadline, and at most a few such works run at once; `memtap
ui` on a DuckDB file another process holds prints one line naming the ways out."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from starlette.testclient import TestClient
from ui_support import recall_page

import memtap
import memtap_ui.app
from memtap import Fact
from memtap_ui import create_app

ORIGIN = "http://127.0.0.1:8097"
TRICKY_IDS = ["a/b/recall", "a/b", "a/b/forget", "x/recall/recall", "recall", "a%2Fb", "ends/with/"]


@pytest.mark.parametrize("entity_id", TRICKY_IDS)
def test_an_entity_id_with_slashes_is_browsed_as_itself(mem: memtap.Memory, entity_id: str) -> None:
    for other in TRICKY_IDS:
        mem.remember(f"the fact of {other!r} about tulips", entity_id=other)
    seg = quote(entity_id, safe="")
    with TestClient(create_app(mem), base_url=ORIGIN) as client:
        page = client.get(f"/entities/{seg}")
        assert page.status_code == 200
        assert f"the fact of {entity_id!r}".replace("'", "&#39;") in page.text
        assert f'action="/entities/{seg}/forget"' in page.text
        recall = recall_page(client, f"/entities/{seg}/recall", q="tulips")
        assert recall.status_code == 200
        shown = [o for o in TRICKY_IDS if f"the fact of {o!r}".replace("'", "&#39;") in recall.text]
        assert shown == [entity_id]
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        gone = client.post(
            f"/entities/{seg}/forget", data={"entity": "yes", "csrf": csrf}, follow_redirects=False
        )
        assert gone.status_code == 303
    assert mem.facts(entity_id=entity_id) == []
    assert all(mem.facts(entity_id=o) for o in TRICKY_IDS if o != entity_id)


class SlowEmbedder:
    """A model that costs 2 ms a text (20,000 facts: 40 s), as a real one on a busy CPU."""

    name = "slow-test-embedder"

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.texts += len(texts)
        time.sleep(0.002 * len(texts))  # the model's compute time
        return np.array([[float(len(t) % 7), 1.0, float(len(t) % 3)] for t in texts], dtype=np.float32)


FACTS = 20_000


def test_recall_page_on_20000_just_imported_facts_answers_within_a_second(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'big.duckdb'}"
    importer = memtap.Memory(url, spool=False, embedder=False)
    words = ["garden", "tulips", "bicycle", "kyoto", "violin", "coffee", "marathon", "python"]
    facts = [
        Fact(entity_id="big", text=f"fact {i}: likes {words[i % 8]} and {words[(i * 3) % 8]} number {i}")
        for i in range(FACTS)
    ]
    importer.store.add_facts(facts)  # what `memtap import` does: no vectors
    importer.close()
    embedder = SlowEmbedder()
    mem = memtap.Memory(url, spool=False, embedder=embedder)  # type: ignore[arg-type]
    try:
        with TestClient(create_app(mem), base_url=ORIGIN) as client:
            # Each page waits at most RECALL_INDEX_WAIT for the words index: reloading the page
            # is the polling, until the index is there (by words: the vectors take 40 s).
            times = []
            found = ""
            give_up = time.monotonic() + 120
            while "likes violin" not in found and time.monotonic() < give_up:
                started = time.monotonic()
                page = client.get("/entities/big/recall", params={"q": "violin", "k": "5"})
                times.append(time.monotonic() - started)
                assert page.status_code == 200
                found = page.text
            assert "likes violin" in found
            for q in ("garden tulips", "marathon"):
                started = time.monotonic()
                assert "likes" in client.get("/entities/big/recall", params={"q": q}).text
                times.append(time.monotonic() - started)
            assert max(times) < 1.0, times
            assert embedder.texts < FACTS  # the page did not wait for the facts' vectors
    finally:
        mem.close()
    print(
        f"recall page on {FACTS} facts: {len(times)} requests, slowest {max(times):.3f} s",
        [round(t, 3) for t in times],
    )


def test_a_page_that_outlasts_the_deadline_answers_503_and_slow_work_is_bounded(
    mem: memtap.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    running = []

    def stuck(memory: memtap.Memory) -> list[Any]:
        running.append(1)
        release.wait(30)
        return []

    monkeypatch.setattr(memtap_ui.app.pages, "entities", stuck)
    monkeypatch.setattr(memtap_ui.app, "PAGE_DEADLINE", 0.3)
    try:
        with TestClient(create_app(mem), base_url=ORIGIN) as client:
            for _ in range(memtap_ui.app.SLOW_PAGES + 3):
                started = time.monotonic()
                page = client.get("/")
                assert time.monotonic() - started < 2.0
                assert page.status_code == 503
                assert "try again" in page.text
            assert len(running) == memtap_ui.app.SLOW_PAGES  # the others were not even started
            assert client.get("/entities/alice").status_code == 200  # a quick page still answers
    finally:
        release.set()


def test_memtap_ui_on_a_locked_duckdb_file_prints_one_line_with_the_ways_out(tmp_path: Path) -> None:
    path = tmp_path / "locked.duckdb"
    memtap.Memory(f"duckdb:///{path}", spool=False, embedder=False).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys; c = duckdb.connect({str(path)!r}); "
            "print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_EMBEDDER": "none"}
        done = subprocess.run(
            [sys.executable, "-m", "memtap.cli", "ui", "--store", f"duckdb:///{path}", "--port", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        holder.communicate("", timeout=30)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "IO Error" not in done.stderr
    for way in ("memtap_ui.start(mem)", "memtap proxy --ui", "postgresql://"):
        assert way in lines[0], lines[0]


STUCK_UI = """
import sys, threading
import memtap_ui.app
from memtap.cli.main import main
memtap_ui.app.pages.entities = lambda memory: threading.Event().wait()  # a store that never answers
sys.argv = ["memtap", "ui", "--store", sys.argv[1], "--port", sys.argv[2]]
main()
"""


def test_memtap_ui_stops_within_seconds_of_sigterm_with_a_page_stuck(store_url: str, tmp_path: Path) -> None:
    import signal
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_EMBEDDER": "none"}
    ui = subprocess.Popen(
        [sys.executable, "-c", STUCK_UI, store_url, str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        give_up = time.monotonic() + 60
        while True:  # deadline polling: the server is up when it answers
            try:
                httpx.get(f"http://127.0.0.1:{port}/static/none", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < give_up and ui.poll() is None
        answers: list[int] = []
        for _ in range(2):  # the home page is stuck: 503 at the deadline, the work goes on
            answers.append(httpx.get(f"http://127.0.0.1:{port}/", timeout=30).status_code)
        assert answers == [503, 503]

        def one_more() -> None:
            try:
                answers.append(httpx.get(f"http://127.0.0.1:{port}/", timeout=30).status_code)
            except httpx.TransportError:  # the server stopped first: what SIGTERM asks
                answers.append(0)

        in_flight = threading.Thread(target=one_more)
        in_flight.start()
        ui.send_signal(signal.SIGTERM)
        started = time.monotonic()
        ui.wait(30)
        stopped_in = time.monotonic() - started
        in_flight.join(30)
    finally:
        if ui.poll() is None:
            ui.kill()
            ui.wait()
    assert stopped_in < 5, stopped_in
