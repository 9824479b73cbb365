"""A secret inside an id (``user-ghp_…``) is never stored: every way an id enters memtap
(``Memory(entity_id=)``, ``scope()``, ``capture()``, ``remember()``, the memory tool)
stores a fingerprint instead, and the app keeps addressing its data with the id it has
(history, facts, recall, sessions, forget). The rule is in docs/security.md."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from reliability_support import BACKENDS
from test_secrets import _dump_store

import memtap
import memtap_openai
from memtap.redact import ID_SECRET_PREFIX, redact_id
from memtap.testing.secrets import SECRETS, FakeSecret, leaked
from memtap.testing.server import ScriptedModelServer

#: The formats that fit in an id (one token, no blanks).
ID_SECRETS = [s for s in SECRETS if s.inline and not any(c.isspace() for c in s.text)]


def test_the_id_corpus_is_broad() -> None:
    assert len(ID_SECRETS) >= 60


@pytest.mark.parametrize("secret", ID_SECRETS, ids=[s.name for s in ID_SECRETS])
def test_a_secret_in_an_id_becomes_a_stable_fingerprint(secret: FakeSecret) -> None:
    for raw in (f"user-{secret.text}", secret.text, f"{secret.text}:chat-7"):
        safe = redact_id(raw)
        assert not leaked(secret, safe), safe
        assert ID_SECRET_PREFIX in safe
        assert redact_id(raw) == safe  # stable
        assert redact_id(safe) == safe  # idempotent: a stored id read back stays itself


def test_ordinary_ids_are_kept_and_different_secrets_stay_different_entities() -> None:
    for plain in ("alice", "user-42", "3f2c9a1b-8d7e-4c5f-9a0b-1c2d3e4f5a6b", "team/a/recall", "é東京"):
        assert redact_id(plain) is plain
    safe = {redact_id(f"user-{s.text}") for s in ID_SECRETS}
    assert len(safe) == len(ID_SECRETS)


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_no_id_secret_at_rest_and_the_app_still_finds_its_data(
    store_url: str, server: ScriptedModelServer, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    default_entity = f"owner-{ID_SECRETS[0].text}"
    store = memtap.Memory(store_url, spool=False).store  # opened through the plugin, as an app would
    mem = memtap.Memory(
        store, plugins=[memtap_openai], entry_points=False, spool=spool_dir, entity_id=default_entity
    )
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="k", max_retries=0))
    entities = {}
    for i, secret in enumerate(ID_SECRETS):
        entity, session, process = f"user-{secret.text}", f"chat-{secret.text}", f"bot-{secret.text}"
        entities[secret.name] = entity
        with mem.scope(entity_id=entity, session_id=session, process_id=process):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"turn {i}"}])
        mem.capture(f"captured {i}", "ok", entity_id=entity, session_id=f"cap-{secret.text}")
        mem.remember(f"fact number {i} about the garden", entity_id=entity, process_id=process)
        mem.handle_memory_tool(json.dumps({"fact": f"tool fact {i} about tulips"}), entity_id=entity)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "default turn"}])
    assert mem.flush(60)

    # The app addresses its data with the ids it has.
    for i, secret in enumerate(ID_SECRETS):
        entity = entities[secret.name]
        history = mem.history(f"chat-{secret.text}", entity_id=entity)
        assert [m.content for m in history][:1] == [f"turn {i}"], secret.name
        assert mem.history(f"cap-{secret.text}", entity_id=entity)[0].content == f"captured {i}"
        texts = {f.text for f in mem.facts(entity_id=entity)}
        assert {f"fact number {i} about the garden", f"tool fact {i} about tulips"} <= texts, secret.name
        assert [h.fact.text for h in mem.recall("garden", entity_id=entity, k=1)] == [
            f"fact number {i} about the garden"
        ]
        assert len(mem.sessions(entity_id=entity)) == 2
    assert mem.history(entity_id=default_entity, session_id="default")[0].content == "default turn"
    assert mem.forget(entity_id=entities[ID_SECRETS[1].name]) > 0
    assert mem.facts(entity_id=entities[ID_SECRETS[1].name]) == []
    mem.close()

    spooled = b"".join(p.read_bytes() for p in spool_dir.rglob("*") if p.is_file()).decode("utf-8", "replace")
    at_rest = _dump_store(store_url) + spooled
    if store_url.startswith("duckdb:"):
        at_rest += Path(store_url.removeprefix("duckdb:///")).read_bytes().decode("latin-1")
    assert [s.name for s in ID_SECRETS if leaked(s, at_rest)] == []
    assert ID_SECRET_PREFIX in at_rest
