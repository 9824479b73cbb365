"""Every page of the memory browser as JSON (``?format=json``, issue 38): the same data the
page shows, as the model's JSON form, with the pages' security headers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from ui_support import recall_page

import memtap
from memtap_ui import create_app

ORIGIN = "http://127.0.0.1:8097"


@pytest.fixture
def client(mem: memtap.Memory) -> Iterator[TestClient]:
    with TestClient(create_app(mem), base_url=ORIGIN) as c:
        yield c


def get_json(client: TestClient, path: str, **params: str) -> dict:
    page = client.get(path, params={**params, "format": "json"})
    assert page.status_code == 200, page.text[:300]
    assert page.headers["content-type"].startswith("application/json")
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    data = page.json()
    assert "csrf" not in data
    return data


def test_every_page_as_json(client: TestClient, mem: memtap.Memory) -> None:
    home = get_json(client, "/")
    assert [e["entity_id"] for e in home["entities"]] == ["alice", "bob"]

    entity = get_json(client, "/entities/alice")
    texts = {row["fact"]["text"] for row in entity["page"]["facts"]}
    assert texts == {f.text for f in mem.facts(entity_id="alice")}
    assert {s["session_id"] for s in entity["page"]["sessions"]} == {"monday", "tuesday"}

    session = get_json(client, "/sessions/monday", entity="alice")
    said = [m["content"] for call in session["calls"] for m in call["messages"]]
    assert said == [m.content for m in mem.history("monday", entity_id="alice")]

    exchange_id = next(f.source_exchange_id for f in mem.facts(entity_id="alice") if f.source_exchange_id)
    exchange = get_json(client, f"/exchanges/{exchange_id}")
    assert exchange["x"]["id"] == exchange_id

    ranked = recall_page(client, "/entities/alice/recall", q="beagle", k="3", format="json").json()
    assert ranked["loading"] is False
    assert [r["fact"]["text"] for r in ranked["results"]] == [
        h.fact.text for h in mem.recall("beagle", entity_id="alice", k=3)
    ]


def test_a_missing_page_is_a_json_404(client: TestClient) -> None:
    page = client.get("/entities/nobody", params={"format": "json"})
    assert page.status_code == 404
    assert page.json() == {"what": "entity 'nobody'"}


def test_the_entity_page_says_who_said_each_fact(client: TestClient, mem: memtap.Memory) -> None:
    from memtap import Fact
    from memtap_ui.pages import said_by

    assert said_by(Fact(entity_id="a", text="t", kind="episode")) == "user"
    assert (
        said_by(Fact(entity_id="a", text="t", kind="episode", metadata={"role": "assistant"})) == "assistant"
    )
    assert said_by(Fact(entity_id="a", text="t", source_exchange_id="x")) == "learned"
    assert said_by(Fact(entity_id="a", text="t")) == "remembered"
    assert said_by(Fact(entity_id="a", text="t", metadata={"source": "memory_tool"})) == "remembered"

    rows = get_json(client, "/entities/alice")["page"]["facts"]
    by_text = {row["fact"]["text"]: row["said_by"] for row in rows}
    assert by_text["Alice prefers green tea"] == "remembered"
    assert by_text["I adopted a beagle called Miso last week."] == "user"
    html = client.get("/entities/alice").text
    assert "<th>said by</th>" in html
    assert html.count('class="said-by"') == len(rows)
