"""The search box (issue 38): on every page, over every entity's facts (all the words of the
query, stemmed: "beagles" finds "beagle") and sessions (by id or entity), linked to their
pages, as HTML and JSON; hostile text stays text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from ui_support import HOSTILE

import memtap
from memtap_ui import create_app

ORIGIN = "http://127.0.0.1:8097"


@pytest.fixture
def client(mem: memtap.Memory) -> Iterator[TestClient]:
    with TestClient(create_app(mem), base_url=ORIGIN) as c:
        yield c


def test_every_page_has_the_search_box(client: TestClient) -> None:
    for path in ("/", "/entities/alice", "/sessions/monday?entity=alice"):
        assert 'action="/search"' in client.get(path).text


def test_search_finds_facts_of_every_entity_and_sessions(client: TestClient, mem: memtap.Memory) -> None:
    found = client.get("/search", params={"q": "beagles Miso", "format": "json"}).json()["found"]
    texts = {(f["entity_id"], f["text"]) for f in found["facts"]}
    expected = {
        (f.entity_id, f.text)
        for e in ("alice", "bob")
        for f in mem.facts(entity_id=e)
        if "beagle" in f.text.lower() and "miso" in f.text.lower()
    }
    assert texts == expected and expected
    assert found["sessions"] == []
    peanuts = client.get("/search", params={"q": "peanuts", "format": "json"}).json()["found"]
    assert {f["entity_id"] for f in peanuts["facts"]} == {"bob"}
    sessions = client.get("/search", params={"q": "tues", "format": "json"}).json()["found"]
    assert [(s["entity_id"], s["session_id"]) for s in sessions["sessions"]] == [("alice", "tuesday")]
    page = client.get("/search", params={"q": "beagle"})
    assert page.status_code == 200
    assert 'href="/entities/alice#fact-' in page.text


def test_search_shows_hostile_text_as_text(client: TestClient) -> None:
    page = client.get("/search", params={"q": "snippet"})
    assert "<script>" not in page.text and HOSTILE not in page.text
    assert "&lt;script&gt;" in page.text
