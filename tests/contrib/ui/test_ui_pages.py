"""The memory browser's pages through Starlette's test client, on a real DuckDB store filled
through the openai SDK: what each page shows, hostile text shown as text, the recall
playground ranking as Memory.recall does."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient
from ui_support import HOSTILE, LOADING_PATIENCE, LOADING_TEXT, recall_page

import memtap
from memtap.testing.timing import wait_for
from memtap_ui import create_app

ORIGIN = "http://127.0.0.1:8097"


@pytest.fixture
def client(mem: memtap.Memory) -> Iterator[TestClient]:
    with TestClient(create_app(mem), base_url=ORIGIN) as c:
        yield c


def text_of(html: str) -> str:
    """A page's visible text, roughly: tags dropped, entities decoded, spaces squeezed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def links(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'(?:href|action|src)="([^"]*)"', html)]


def test_home_lists_entities_with_fact_counts_and_last_activity(client, mem):
    page = client.get("/")
    assert page.status_code == 200
    rows = re.findall(r'<tr>\s*<td><a href="/entities/(\w+)">.*?</tr>', page.text, re.S)
    assert rows == ["alice", "bob"]  # alice spoke last
    alice = re.search(
        r'href="/entities/alice">alice</a></td>\s*<td class="num">(\d+)</td>\s*<td class="num">(\d+)',
        page.text,
    )
    assert alice is not None
    assert int(alice.group(1)) == len(mem.facts(entity_id="alice"))
    assert int(alice.group(2)) == 2
    last = max(
        *(s.updated_at for s in mem.sessions(entity_id="alice")),
        *(f.created_at for f in mem.facts(entity_id="alice")),
    )
    assert last.strftime("%Y-%m-%d %H:%M:%S") in page.text


def test_entity_page_shows_facts_history_sources_and_sessions(client, mem):
    page = client.get("/entities/alice")
    assert page.status_code == 200
    text = text_of(page.text)
    assert "Alice lives in Kyoto" in text
    assert "replaced 1 earlier version(s) Alice lives in Osaka" in text
    assert "Alice prefers green tea" in text and "2026-11-30 09:00:00" in text
    episode = next(f for f in mem.facts(entity_id="alice") if f.source_exchange_id)
    assert f'href="/exchanges/{episode.source_exchange_id}"' in page.text
    assert 'href="/sessions/monday?entity=alice"' in page.text
    assert 'href="/sessions/tuesday?entity=alice"' in page.text
    for f in mem.facts(entity_id="alice"):
        assert f'name="fact_id" value="{f.id}"' in page.text
    assert "Bob" not in text and "peanuts" not in text  # isolation


def test_hostile_text_is_shown_as_text_on_every_page(client, mem):
    assert HOSTILE.startswith("<script>")
    exchange = next(
        f.source_exchange_id
        for f in mem.facts(entity_id="alice")
        if HOSTILE in f.text and f.source_exchange_id
    )
    for path in (
        "/entities/alice",
        "/sessions/monday?entity=alice",
        f"/exchanges/{exchange}",
        "/entities/alice/recall?q=snippet+script",
    ):
        page = client.get(path)
        assert page.status_code == 200, path
        assert "<script" not in page.text and "<img" not in page.text, path
        assert "&lt;script&gt;document.title=" in page.text, path
        assert HOSTILE in text_of(page.text), path
    assert "script-src" not in client.get("/").headers["content-security-policy"]  # no script at all
    assert "default-src 'none'" in client.get("/").headers["content-security-policy"]


def test_hostile_ids_stay_in_their_path_segment(mem):
    mem.remember("a fact", entity_id='../x"><b>')
    with TestClient(create_app(mem), base_url=ORIGIN) as client:
        home = client.get("/")
        entity = quote('../x"><b>', safe="")
        assert f'href="/entities/{entity}"' in home.text
        assert "<b>" not in home.text
        page = client.get(f"/entities/{entity}")
        assert page.status_code == 200
        assert "a fact" in page.text
        assert f'action="/entities/{entity}/forget"' in page.text


def test_session_page_shows_messages_grouped_by_call(client, mem):
    page = client.get("/sessions/monday?entity=alice")
    assert page.status_code == 200
    text = text_of(page.text)
    said = [m.content for m in mem.history("monday", entity_id="alice")]
    positions = [text.index(m) for m in said]
    assert positions == sorted(positions)
    calls = {m.exchange_id for m in mem.history("monday", entity_id="alice")}
    assert len(calls) == 3
    for exchange_id in calls:
        assert f'href="/exchanges/{exchange_id}"' in page.text
    assert "call 1" in text and "call 3" in text and "gpt-test" in text


def test_session_page_says_what_was_injected_into_each_call(client):
    monday = text_of(client.get("/sessions/monday?entity=alice").text)
    assert "injected: nothing" in monday  # the session's first call
    assert "injected: 2 earlier turn(s)" in monday and "injected: 4 earlier turn(s)" in monday
    tuesday = text_of(client.get("/sessions/tuesday?entity=alice").text)
    assert "injected: 2 recalled fact(s)" in tuesday


def test_exchange_page_explains_the_call(client, mem):
    history = mem.history("tuesday", entity_id="alice")
    explanation = mem.explain(history[0].exchange_id)
    (block,) = explanation.blocks
    assert block.kind == "recall" and len(block.facts) == 2 and block.left_out
    page = client.get(f"/exchanges/{history[0].exchange_id}")
    assert page.status_code == 200
    text = text_of(page.text)
    assert "What should I feed Miso, my beagle?" in text and "measured kibble" in text
    assert "openai" in text and "gpt-test" in text
    assert 'href="/sessions/tuesday?entity=alice"' in page.text
    assert "Recalled facts: 2 injected, 2 left out" in text
    rows = re.findall(r'<tr class="explained-fact" data-fact-id="(\w+)">(.*?)</tr>', page.text, re.S)
    shown = [(fact_id, [c for c in re.findall(r">([^<]*)</td>", row)]) for fact_id, row in rows]
    expected = [*block.facts, *block.left_out]
    assert [fact_id for fact_id, _ in shown] == [f.fact_id for f in expected]
    for (_, cells), f in zip(shown, expected):
        assert cells[0] == f"{f.score:.3f}"  # the score, then its parts
        assert cells[1] == f"{f.parts['words']:.3f}"
    assert text.count("k facts injected already") == len(block.left_out)


def test_exchange_page_shows_the_injected_history(client, mem):
    third = {m.exchange_id for m in mem.history("monday", entity_id="alice")}
    explained = [mem.explain(x) for x in third]
    x = next(e for e in explained if e.turns and len(e.turns) == 4)
    page = client.get(f"/exchanges/{x.exchange.id}")
    text = text_of(page.text)
    assert "History: 4 earlier turn(s) of the session" in text
    for turn in x.turns:
        assert turn.content in text
        assert f'href="/exchanges/{turn.exchange_id}"' in page.text


@pytest.mark.parametrize("query", ["what should Miso eat", "where does alice live", "tea"])
def test_recall_playground_ranks_as_memory_recall(client, mem, query):
    page = recall_page(client, "/entities/alice/recall", q=query, k="5")
    assert page.status_code == 200
    expected = mem.recall(query, entity_id="alice", k=5)
    assert expected
    rows = re.findall(r'<td class="num score">([\d.]+)</td>.*?<td class="text">(.*?)</td>', page.text, re.S)
    assert [(float(score), unescape(text)) for score, text in rows] == [
        (round(s.score, 3), s.text) for s in expected
    ]


def test_the_entity_page_loads_the_entity_for_its_recall_playground(client, mem):
    """The page links to the recall playground, which waits 0.3 s at most for a cold index."""
    assert mem.recall_stats().index_loads == 0
    assert client.get("/entities/alice").status_code == 200
    wait_for(lambda: mem.recall_stats().index_loads > 0, LOADING_PATIENCE, what="the load of alice's index")
    page = client.get("/entities/alice/recall", params={"q": "beagle", "k": 1})
    assert LOADING_TEXT not in page.text and "beagle" in page.text


def test_missing_things_are_404(client):
    assert client.get("/entities/nobody").status_code == 404
    assert client.get("/sessions/nothing").status_code == 404
    assert client.get("/exchanges/0000").status_code == 404
    assert client.get("/static/style.css").status_code == 200


def test_every_link_stays_under_the_mount(mem):
    with TestClient(create_app(mem), base_url=ORIGIN, root_path="/_memtap") as client:
        seen = set()
        for path in ("/_memtap/", "/_memtap/entities/alice", "/_memtap/sessions/monday?entity=alice"):
            page = client.get(path)
            assert page.status_code == 200, path
            seen.update(links(page.text))
        assert seen and all(link.startswith("/_memtap/") for link in seen), seen
        assert client.get("/_memtap/static/style.css").status_code == 200


def test_a_long_list_of_facts_shows_the_newest_until_asked_for_all(mem, monkeypatch):
    import memtap_ui.app

    monkeypatch.setattr(memtap_ui.app, "FACTS_SHOWN", 3)
    count = len(mem.facts(entity_id="alice"))
    with TestClient(create_app(mem), base_url=ORIGIN) as client:
        page = client.get("/entities/alice").text
        assert page.count('name="fact_id"') == 3
        assert f"The newest 3 of {count} facts." in text_of(page)
        assert 'href="/entities/alice?facts=all"' in page
        assert client.get("/entities/alice?facts=all").text.count('name="fact_id"') == count
