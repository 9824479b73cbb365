"""``memtap.sdk.Patches``: what an adapter sets on a client is undone exactly.

Exactly means ``vars(obj)`` is what it was: a value the object held itself is put back (the
same object), an attribute it did not hold is deleted (its class's shows through again, or
none at all), on instances, classes, modules and slotted objects alike; restoring twice,
patching again, stacking two patch sets and a failure half-way all end the same way. The
last tests drive it through ``Memory.register`` / ``unregister`` with a real HTTP client.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
from kit_support import KitClient, KitPlugin

import memtap
from memtap.sdk import Patches


class Base:
    shared = "base"

    def method(self) -> str:
        return "class"


class Child(Base):
    pass


class Slotted:
    __slots__ = ("value",)


def replacement(*args: Any, **kwargs: Any) -> str:
    return "patched"


def test_an_attribute_that_did_not_exist_is_deleted_again():
    obj = Base()
    before = dict(vars(obj))
    patches = Patches()
    patches.set(obj, "brand_new", 1)
    assert obj.brand_new == 1
    patches.restore()
    assert not hasattr(obj, "brand_new")
    assert vars(obj) == before


def test_a_class_attribute_patched_on_an_instance_shows_through_again():
    obj = Base()
    patches = Patches()
    wrapped = patches.wrap(obj, "method", lambda original: lambda: "wrapped " + original())
    assert obj.method() == "wrapped class" and vars(obj)["method"] is wrapped
    assert Base().method() == "class"  # other instances and the class are untouched
    patches.restore()
    assert "method" not in vars(obj)
    assert obj.method() == "class" and obj.method.__func__ is Base.method


def test_a_value_the_instance_held_itself_is_put_back_as_the_same_object():
    obj = Base()
    own = lambda: "own"  # noqa: E731 (an instance attribute, as gRPC stubs hold their callables)
    obj.method = own  # type: ignore[method-assign]
    patches = Patches()
    patches.set(obj, "method", replacement)
    patches.restore()
    assert vars(obj)["method"] is own


def test_patching_a_class_restores_its_own_dict_and_leaves_the_base_alone():
    patches = Patches()
    patches.set(Child, "method", replacement)  # inherited: Child does not define it
    patches.set(Base, "shared", "patched")  # defined on Base itself
    assert Child().method() == "patched" and Child.shared == "patched"
    patches.restore()
    assert "method" not in vars(Child) and Child().method() == "class"
    assert vars(Base)["shared"] == "base"


def test_a_module_attribute_is_put_back():
    module = types.ModuleType("fake_sdk")
    module.completion = replacement  # type: ignore[attr-defined]
    patches = Patches()
    patches.wrap(module, "completion", lambda original: lambda: original().upper())
    assert module.completion() == "PATCHED"
    patches.restore()
    assert module.completion is replacement


def test_a_slotted_object_without_a_dict():
    obj = Slotted()
    patches = Patches()
    patches.set(obj, "value", 1)
    patches.restore()
    assert not hasattr(obj, "value")
    obj.value = 2
    patches.set(obj, "value", 3)
    patches.restore()
    assert obj.value == 2


def test_restoring_twice_does_nothing_the_second_time_and_patching_again_works():
    obj = Base()
    patches = Patches()
    patches.set(obj, "method", replacement)
    patches.restore()
    obj.method = replacement  # the app's own value, set after the restore
    patches.restore()
    assert vars(obj)["method"] is replacement  # not deleted by a second restore
    del obj.method
    again = Patches()
    again.set(obj, "method", replacement)
    again.restore()
    assert vars(obj) == {}


def test_two_patch_sets_on_one_attribute_restored_last_first():
    obj = Base()
    outer, inner = Patches(), Patches()
    outer.wrap(obj, "method", lambda original: lambda: "outer " + original())
    inner.wrap(obj, "method", lambda original: lambda: "inner " + original())
    assert obj.method() == "inner outer class"
    inner.restore()
    assert obj.method() == "outer class"
    outer.restore()
    assert vars(obj) == {}


def test_a_value_replaced_after_patching_is_left_and_said(caplog: pytest.LogCaptureFixture):
    obj = Base()
    patches = Patches()
    patches.set(obj, "method", replacement)
    theirs = lambda: "theirs"  # noqa: E731
    obj.method = theirs  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="memtap.adapters.patches"):
        patches.restore()
    assert vars(obj)["method"] is theirs
    assert "Base.method was replaced after memtap patched it" in caplog.text


def test_a_failure_half_way_undoes_what_was_done_and_raises():
    obj = Base()
    patches = Patches()
    with pytest.raises(AttributeError), patches.all_or_nothing():
        patches.set(obj, "method", replacement)
        patches.set(obj, "extra", 1)
        patches.wrap(obj, "missing", lambda original: original)  # no such attribute
    assert vars(obj) == {}


def test_a_failing_undo_step_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture):
    obj = Base()
    patches = Patches()
    patches.set(obj, "method", replacement)
    patches.on_restore(lambda: 1 / 0)  # type: ignore[func-returns-value]
    patches.set(obj, "extra", 1)
    with caplog.at_level(logging.ERROR, logger="memtap.adapters.patches"):
        patches.restore()
    assert vars(obj) == {}
    assert "could not undo one of its patches" in caplog.text


# -- through Memory.register / unregister ----------------------------------------------------


def test_register_twice_then_unregister_twice_leaves_the_client_as_it_was(memtap_server):
    client = KitClient(memtap_server.openai_base_url)
    before = dict(vars(client))
    mem = memtap.Memory("memory://", plugins=[KitPlugin()], entry_points=False)
    try:
        mem.register(client)
        patched = dict(vars(client))
        mem.register(client)  # idempotent: patched once
        assert {k: v for k, v in vars(client).items()} == patched
        assert {"chat", "chat_stream", "_build_body"} <= patched.keys()
        mem.unregister(client)
        mem.unregister(client)
        assert vars(client) == before
        mem.register(client)  # and once more, after the undo
        with mem.scope(session_id="again"):
            assert client.chat(messages=[{"role": "user", "content": "hi"}])["choices"]
        mem.unregister(client)
        assert vars(client) == before
        mem.flush()
        assert [m.content for m in mem.history(session_id="again")] == ["hi", "You said: hi"]
    finally:
        mem.close()
