"""A store's change feed: what other processes changed, so that this one's caches follow.

Several processes may share one store (PostgreSQL: app servers, the proxy's workers). Each
:class:`memtap.Memory` caches what the request path needs: a recall index per entity
(:class:`memtap.longterm.recall.FactIndexes`) and recent session histories
(:class:`memtap.history.injector.SessionHistories`). Without a feed, another process's remember or
forget reaches them only when an index is refreshed (a minute or more). A store that can
tell every process what changed offers the optional method ``watch_changes(fn)`` (see
:class:`memtap.storage.store.Store`): it calls ``fn`` with a :class:`StoreChange` for each change
written through another store object on the same data (another process, or another
:class:`memtap.Memory` in this one), and with :data:`EVERYTHING` when it may have missed some
(its connection to the feed broke): the caches then treat everything as changed.
:class:`ChangeWatchers` does a backend's bookkeeping; :class:`CacheFollower` is what a
Memory does with the changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import attrs

log = logging.getLogger("memtap.storage.changes")


def _as_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class StoreChange:
    """What changed in a store: an entity's facts (``facts``; ``fact_ids`` names the facts
    added, when the store can say, so that a cache adds them instead of reloading the
    entity), one of its sessions (``session_id``: an exchange was written), or all of its
    data (``forgotten``). ``entity_id=None`` means "anything may have changed"
    (:data:`EVERYTHING`)."""

    entity_id: str | None
    facts: bool = False
    session_id: str | None = None
    forgotten: bool = False
    fact_ids: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)

    @property
    def everything(self) -> bool:
        """Whether anything may have changed (the feed lost track)."""
        return self.entity_id is None


#: The change a feed reports when it may have missed changes (after it reconnects).
EVERYTHING = StoreChange(entity_id=None)

ChangeCallback = Callable[[StoreChange], None]


class ChangeWatchers:
    """The callbacks of a store offering ``watch_changes``: :meth:`watch` registers one,
    :meth:`changed` calls them all (a callback's error is logged, never raised into the
    feed)."""

    def __init__(self) -> None:
        self._watchers: list[ChangeCallback] = []

    def __bool__(self) -> bool:
        return bool(self._watchers)

    def watch(self, fn: ChangeCallback) -> None:
        """Call ``fn(change)`` for every change reported from now on."""
        self._watchers.append(fn)

    def changed(self, changes: Iterable[StoreChange]) -> None:
        """Tell the watchers about ``changes``."""
        for change in changes:
            for fn in list(self._watchers):
                try:
                    fn(change)
                except Exception:
                    log.exception("memtap: a store change watcher failed")


class CacheFollower:
    """Applies store changes to a Memory's caches; every action only schedules background
    work (a feed's thread must keep reading), and a cache keeps serving what it has until
    its replacement is ready, except after a forget (nothing of the entity may be served).

    Each argument is what to call for one kind of change: ``refresh_facts(entity_id,
    fact_ids)`` (the facts added, or ``()``: reload the entity),
    ``refresh_session(entity_id, session_id)``, ``forgotten(entity_id)``, and
    ``refresh_all()`` when the feed may have missed changes.
    """

    def __init__(
        self,
        *,
        refresh_facts: Callable[[str, tuple[str, ...]], None],
        refresh_session: Callable[[str, str], None],
        forgotten: Callable[[str], None],
        refresh_all: Callable[[], None],
    ) -> None:
        self._refresh_facts = refresh_facts
        self._refresh_session = refresh_session
        self._forgotten = forgotten
        self._refresh_all = refresh_all

    def __call__(self, change: StoreChange) -> None:
        """Apply one change (the feed's thread: only schedules work)."""
        if change.entity_id is None:
            self._refresh_all()
            return
        if change.forgotten:
            self._forgotten(change.entity_id)
            return
        if change.facts:
            self._refresh_facts(change.entity_id, change.fact_ids)
        if change.session_id is not None:
            self._refresh_session(change.entity_id, change.session_id)
