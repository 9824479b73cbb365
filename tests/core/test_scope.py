from __future__ import annotations

import asyncio
import random
import re
import threading

import pytest

import memtap
from memtap.protocol.model import Attribution
from memtap.request.scope import AttributionScopes


# Own mem: a default entity and session set on the Memory itself (what these tests scope over).
@pytest.fixture
def mem():
    m = memtap.Memory("memory://", entity_id="anon", session_id="main", entry_points=False)
    yield m
    m.close()


DEFAULT = Attribution(entity_id="anon", session_id="main")


def test_outside_any_scope_calls_get_the_memory_defaults(mem):
    assert mem.current_attribution() == DEFAULT


def test_scope_sets_fields_and_yields_the_attribution(mem):
    with mem.scope(entity_id="alice", session_id="s1", process_id="bot") as attribution:
        assert attribution == Attribution(entity_id="alice", session_id="s1", process_id="bot")
        assert mem.current_attribution() == attribution
    assert mem.current_attribution() == DEFAULT


def test_nested_scopes_inherit_unspecified_fields(mem):
    with mem.scope(entity_id="alice", process_id="bot"):
        with mem.scope(session_id="s2"):
            assert mem.current_attribution() == Attribution(
                entity_id="alice", session_id="s2", process_id="bot"
            )
            with mem.scope(entity_id="bob"):
                assert mem.current_attribution() == Attribution(
                    entity_id="bob", session_id="s2", process_id="bot"
                )
            assert mem.current_attribution().entity_id == "alice"
        assert mem.current_attribution() == Attribution(
            entity_id="alice", session_id="main", process_id="bot"
        )
    assert mem.current_attribution() == DEFAULT


def test_scope_is_reset_when_the_block_raises(mem):
    with (
        pytest.raises(RuntimeError, match="inside"),
        mem.scope(entity_id="alice"),
        mem.scope(session_id="s1"),
    ):
        raise RuntimeError("inside")
    assert mem.current_attribution() == DEFAULT


def test_scopes_work_with_any_default():
    default = Attribution(entity_id="x", session_id="y")
    scopes = AttributionScopes(default)
    with scopes.scope(entity_id="alice"):
        assert scopes.current() == Attribution(entity_id="alice", session_id="y")
    assert scopes.current() == default


def test_new_threads_start_unscoped(mem):
    seen: list[Attribution] = []
    with mem.scope(entity_id="alice", session_id="s1"):
        t = threading.Thread(target=lambda: seen.append(mem.current_attribution()))
        t.start()
        t.join()
    assert seen == [DEFAULT]


def test_concurrent_threads_keep_their_own_scope(mem):
    barrier = threading.Barrier(8)
    errors: list[str] = []

    def work(i: int) -> None:
        with mem.scope(entity_id=f"user{i}", session_id=f"s{i}"):
            barrier.wait()
            for _ in range(50):
                a = mem.current_attribution()
                if (a.entity_id, a.session_id) != (f"user{i}", f"s{i}"):
                    errors.append(f"thread {i} saw {a}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_concurrent_asyncio_tasks_keep_their_own_scope(mem):
    rng = random.Random(1234)
    delays = [[rng.uniform(0, 0.005) for _ in range(3)] for _ in range(50)]

    async def task(i: int) -> tuple[str, str]:
        expected = Attribution(entity_id=f"user{i}", session_id=f"s{i}", process_id=f"p{i}")
        assert mem.current_attribution() == DEFAULT
        with mem.scope(entity_id=f"user{i}", session_id=f"s{i}", process_id=f"p{i}"):
            for delay in delays[i]:
                await asyncio.sleep(delay)
                assert mem.current_attribution() == expected
        await asyncio.sleep(0)
        assert mem.current_attribution() == DEFAULT
        return expected.entity_id, expected.session_id

    async def main() -> list[tuple[str, str]]:
        return await asyncio.gather(*(task(i) for i in range(50)))

    assert asyncio.run(main()) == [(f"user{i}", f"s{i}") for i in range(50)]
    assert mem.current_attribution() == DEFAULT


def test_asyncio_task_inherits_the_scope_it_was_created_in(mem):
    async def child() -> tuple[Attribution, Attribution]:
        inherited = mem.current_attribution()
        with mem.scope(entity_id="child"):
            await asyncio.sleep(0)
            inner = mem.current_attribution()
        return inherited, inner

    async def main() -> tuple[Attribution, Attribution, Attribution]:
        with mem.scope(entity_id="parent", session_id="s1"):
            task = asyncio.create_task(child())
            inherited, inner = await task
            after = mem.current_attribution()
        return inherited, inner, after

    inherited, inner, after = asyncio.run(main())
    assert inherited == Attribution(entity_id="parent", session_id="s1")
    assert inner == Attribution(entity_id="child", session_id="s1")
    assert after == Attribution(entity_id="parent", session_id="s1")


@pytest.mark.parametrize(
    ("field", "value"),
    [("entity_id", ""), ("session_id", ""), ("process_id", ""), ("entity_id", 42), ("session_id", b"s1")],
)
def test_invalid_scope_values_raise_a_clear_error(mem, field, value):
    message = f"scope {field} must be a non-empty string, got {value!r}"
    with pytest.raises(ValueError, match=re.escape(message)), mem.scope(**{field: value}):
        pass
    assert mem.current_attribution() == DEFAULT


# -- scopes belong to the Memory that opened them (issue #13, item 4) ----------------------


@pytest.fixture
def other():
    m = memtap.Memory("memory://", entity_id="tenant-b", session_id="b-main", entry_points=False)
    yield m
    m.close()


def test_a_scope_on_one_memory_leaves_another_memorys_attribution_alone(mem, other):
    with mem.scope(entity_id="tenant-a", session_id="private"):
        assert other.current_attribution() == Attribution(entity_id="tenant-b", session_id="b-main")
        with other.scope(session_id="b-2"):
            assert mem.current_attribution() == Attribution(entity_id="tenant-a", session_id="private")
            assert other.current_attribution() == Attribution(entity_id="tenant-b", session_id="b-2")
        captured = other.capture([memtap.Message("user", "hello from b")], [])
    assert captured.attribution == Attribution(entity_id="tenant-b", session_id="b-main")
    assert other.flush()
    assert [s.entity_id for s in other.sessions()] == ["tenant-b"]
    assert other.history("b-main", entity_id="tenant-b")[0].content == "hello from b"


def test_scopes_of_two_memories_in_threads_and_tasks_stay_apart(mem, other):
    async def task(i: int) -> tuple[Attribution, Attribution]:
        with mem.scope(entity_id=f"a{i}"):
            await asyncio.sleep(0)
            with other.scope(session_id=f"b{i}"):
                await asyncio.sleep(0)
                return mem.current_attribution(), other.current_attribution()

    async def main() -> list[tuple[Attribution, Attribution]]:
        return await asyncio.gather(*(task(i) for i in range(20)))

    for i, (a, b) in enumerate(asyncio.run(main())):
        assert a == Attribution(entity_id=f"a{i}", session_id="main")
        assert b == Attribution(entity_id="tenant-b", session_id=f"b{i}")

    seen: list[Attribution] = []
    with mem.scope(entity_id="tenant-a"):
        t = threading.Thread(target=lambda: seen.append(other.current_attribution()))
        t.start()
        t.join()
    assert seen == [Attribution(entity_id="tenant-b", session_id="b-main")]
