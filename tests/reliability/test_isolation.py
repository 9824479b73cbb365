"""Isolation under hypothesis-generated interleavings of entities and sessions: history,
facts and recall never return another entity's data, and no request carries it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import API_KEY

import memtap
import memtap_openai
from memtap.testing.server import ScriptedModelServer
from memtap_duckdb.store import DuckDBStore

ENTITIES = ["alice", "bob", "carol"]
SESSIONS = ["s1", "s2", "shared"]

ops = st.lists(
    st.tuples(
        st.sampled_from(["call", "remember", "recall", "history"]),
        st.sampled_from(ENTITIES),
        st.sampled_from(SESSIONS),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=25,
)


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[memtap.Memory, openai.OpenAI, ScriptedModelServer]]:
    path: Path = tmp_path_factory.mktemp("iso") / "m.duckdb"
    with ScriptedModelServer() as server:
        mem = memtap.Memory(DuckDBStore(path), plugins=[memtap_openai], entry_points=False, spool=False)
        client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
        yield mem, client, server
        mem.close()


def _mine(text: str, entity: str) -> bool:
    tags = [t.split("]", 1)[0] for t in text.split("[ent:")[1:]]
    return all(tag == entity for tag in tags)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=ops)
def test_interleavings_never_cross_entities(
    setup: tuple[memtap.Memory, openai.OpenAI, ScriptedModelServer], program: list[tuple[str, str, str, int]]
) -> None:
    mem, client, server = setup
    for op, entity, session, n in program:
        tag = f"[ent:{entity}] {session} {n}"
        with mem.scope(entity_id=entity, session_id=session):
            if op == "call":
                server.clear()
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"{tag} says hi"}]
                )
                (request,) = server.requests
                for message in request.json["messages"]:
                    assert _mine(str(message.get("content")), entity), (entity, message)
            elif op == "remember":
                mem.remember(f"{tag} likes item{n}")
            elif op == "recall":
                for scored in mem.recall(f"likes item{n}", k=10):
                    assert scored.fact.entity_id == entity and _mine(scored.text, entity)
                for fact in mem.facts():
                    assert fact.entity_id == entity
            else:
                for message in mem.history(session, entity_id=entity):
                    assert _mine(message.content, entity)
