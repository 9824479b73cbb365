from __future__ import annotations

from pathlib import Path

import pytest

import memtap
from memtap import Attribution, Exchange, Message, ScoredFact, StoreError, UnknownStoreURLError
from memtap.errors import UnsupportedClientError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("MEMTAP_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("MEMTAP_STORE", raising=False)


# Own mem: Memory("memory://") with the spool on, the public API as a user gets it.
@pytest.fixture
def mem():
    m = memtap.Memory("memory://", entry_points=False)
    yield m
    m.close()


class AcmeChatClient:
    pass


def exchange_for(entity: str, session: str, text: str) -> Exchange:
    return Exchange(
        attribution=Attribution(entity_id=entity, session_id=session),
        provider="test",
        operation="chat",
        input=[Message(role="user", content=text)],
        output=[Message(role="assistant", content=f"re: {text}")],
    )


def test_register_unknown_client_names_installed_providers_and_what_to_install(mem):
    with pytest.raises(UnsupportedClientError) as info:
        mem.register(AcmeChatClient())
    message = str(info.value)
    assert "AcmeChatClient" in message
    assert "Installed providers: none" in message
    assert "pip install memtap-" in message
    assert "from a clone of memtap: `pip install ./plugins/openai`" in message
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, memtap.MemtapError)
    assert list(mem.registered()) == []


def test_unknown_store_url_lists_installed_schemes():
    with pytest.raises(UnknownStoreURLError) as info:
        memtap.Memory("nosuchdb:///tmp/x", entry_points=False)
    message = str(info.value)
    assert "'nosuchdb'" in message
    assert "Installed schemes: memory" in message
    assert "`pip install memtap-duckdb` (from a clone of memtap: `pip install ./plugins/duckdb`)" in message
    assert isinstance(info.value, ValueError)


def test_remember_and_facts(mem):
    fact = mem.remember("  Alice lives in Tokyo  ", entity_id="alice")
    assert fact.text == "Alice lives in Tokyo"
    assert fact.entity_id == "alice"
    assert mem.facts(entity_id="alice") == [fact]
    assert mem.facts(entity_id="bob") == []


def test_remember_uses_the_current_scope(mem):
    with mem.scope(entity_id="carol", process_id="bot"):
        fact = mem.remember("Carol has a beagle")
        assert mem.facts() == [fact]
    assert (fact.entity_id, fact.process_id) == ("carol", "bot")
    assert mem.facts() == []


@pytest.mark.parametrize("text", ["", "   ", None, 42])
def test_remember_rejects_empty_or_non_text(mem, text):
    with pytest.raises(ValueError, match="non-empty string"):
        mem.remember(text, entity_id="alice")
    assert mem.facts(entity_id="alice") == []


def test_recall_returns_scored_facts_best_first(mem):
    tokyo = mem.remember("Alice lives in Tokyo", entity_id="alice")
    mem.remember("Alice likes green tea", entity_id="alice")
    mem.remember("Alice's cat is named Miso", entity_id="alice")

    results = mem.recall("where does alice live in tokyo", entity_id="alice")

    assert all(isinstance(r, ScoredFact) for r in results)
    assert results[0].fact == tokyo
    assert results[0].text == "Alice lives in Tokyo"
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)
    assert len(mem.recall("alice", entity_id="alice", k=2)) == 2


def test_recall_never_returns_another_entitys_facts(mem):
    mem.remember("Bob lives in Tokyo", entity_id="bob")
    mem.remember("Alice lives in Osaka", entity_id="alice")

    alice = mem.recall("who lives in Tokyo", entity_id="alice")
    assert [r.fact.entity_id for r in alice] == ["alice"]
    assert mem.recall("Bob Tokyo", entity_id="carol") == []
    with mem.scope(entity_id="bob"):
        assert [r.text for r in mem.recall("lives in Osaka")] == ["Bob lives in Tokyo"]


def test_forget_removes_only_that_entity_and_counts(mem):
    mem.store.write_exchanges([exchange_for("alice", "s1", "hi"), exchange_for("bob", "s1", "yo")])
    mem.remember("Alice lives in Tokyo", entity_id="alice")
    mem.remember("Alice likes tea", entity_id="alice")
    bob_fact = mem.remember("Bob likes coffee", entity_id="bob")

    assert mem.forget(entity_id="alice") == 3

    assert mem.facts(entity_id="alice") == []
    assert mem.history("s1", entity_id="alice") == []
    assert mem.facts(entity_id="bob") == [bob_fact]
    assert [m.content for m in mem.history("s1", entity_id="bob")] == ["yo", "re: yo"]
    assert mem.forget(entity_id="alice") == 0


def test_forget_requires_an_entity(mem):
    with pytest.raises(ValueError, match="entity_id"):
        mem.forget(entity_id="")


def test_close_is_idempotent_and_stops_registration():
    m = memtap.Memory("memory://", entry_points=False)
    m.close()
    m.close()
    with pytest.raises(StoreError):
        m.register(AcmeChatClient())


def test_memory_is_a_context_manager():
    with memtap.Memory("memory://", entry_points=False) as m:
        m.remember("x marks the spot", entity_id="e")
    with pytest.raises(StoreError):
        m.store.facts(entity_id="e")


def test_store_comes_from_env_when_no_url_is_given(monkeypatch):
    monkeypatch.setenv("MEMTAP_STORE", "memory://from-env")
    with memtap.Memory(entry_points=False) as m:
        assert m.url == "memory://from-env"
        assert repr(m) == "memtap.Memory('memory://from-env')"


def test_explicit_url_wins_over_env(monkeypatch):
    monkeypatch.setenv("MEMTAP_STORE", "memory://from-env")
    with memtap.Memory("memory://explicit", entry_points=False) as m:
        assert m.url == "memory://explicit"


def test_install_hints_give_the_published_name_and_the_folder_of_a_clone():
    from memtap.errors import install_hint

    assert install_hint("memtap-anthropic") == (
        "`pip install memtap-anthropic` (from a clone of memtap: `pip install ./plugins/anthropic`)"
    )
    assert install_hint("memtap-proxy").endswith("`pip install ./contrib/proxy`)")
    assert install_hint("memtap").endswith(
        "`pip install ./core ./plugins/openai ./plugins/duckdb ./plugins/minilm .`)"
    )
    root = Path(__file__).resolve().parents[2]
    for name in ("memtap-core", "memtap-openai", "memtap-proxy", "memtap-langchain"):
        folder = install_hint(name).rsplit("`pip install ", 1)[1].rstrip("`)")
        assert (root / folder / "pyproject.toml").is_file(), folder
