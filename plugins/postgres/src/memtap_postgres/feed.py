"""The change feed of a PostgreSQL store: LISTEN/NOTIFY between the processes sharing it.

Why NOTIFY rather than an outbox table read incrementally: a notification is sent by the
writing transaction itself and delivered only if it commits, at once (no polling delay, no
polling load: a process that writes nothing and reads nothing costs the server one idle
connection), and leaves nothing behind to clean up. What it does not do is keep
notifications for a listener that is disconnected; an outbox would, but a process that
reconnects after an outage must still assume its caches are stale (it may have been away
longer than any retention), so the feed reports :data:`memtap.sdk.storage.EVERYTHING` after every
(re)connection instead, and the caches reload what they hold.

Each write transaction adds one ``pg_notify`` on the store's channel (one per schema: stores
in other schemas of the database are not told) with a compact JSON payload: the writing
store object's ``origin`` (its own notifications are skipped: its process updated its caches
already) and the changes, ``["f", entity, fact_id]`` (a fact added: the other processes
read it by id and add it to their index of the entity, instead of reloading it),
``["s", entity, session]`` (an exchange), ``["x", entity]`` (forgotten). A payload is kept
under PostgreSQL's 8000-byte limit by splitting it; a single change too long for one (an
entity id of kilobytes) is sent as ``["*"]``: everything may have changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import psycopg
from psycopg import sql

from memtap.sdk.storage import EVERYTHING, ChangeWatchers, StoreChange

from .watchdog import Watchdog, cut

log = logging.getLogger("memtap.postgres")

#: Bytes of payload per notification (PostgreSQL refuses 8000 and more).
PAYLOAD_LIMIT = 7900
#: Seconds without a notification after which the listener checks its connection.
PING_EVERY = 5.0
#: Seconds a ping may take before the connection is taken for dead.
PING_LIMIT = 5.0
#: Seconds between reconnection attempts: the first at once, then growing to the last.
RECONNECT_DELAYS = (0.0, 0.2, 0.5, 1.0, 2.0)
#: ``application_name`` of the listening connection (seen in ``pg_stat_activity``).
APPLICATION_NAME = "memtap-feed"


def channel_name(schema: str) -> str:
    """The notification channel of the store in ``schema`` (short and safe as an
    identifier whatever the schema is called)."""
    return "memtap_changes_" + hashlib.blake2b(schema.encode(), digest_size=8).hexdigest()


def encode(change: StoreChange) -> list[str]:
    """The JSON form of one change (see the module docstring)."""
    if change.entity_id is None:
        return ["*"]
    if change.forgotten:
        return ["x", change.entity_id]
    if change.session_id is not None:
        return ["s", change.entity_id, change.session_id]
    return ["f", change.entity_id, *change.fact_ids]


def decode(item: Any) -> StoreChange:
    """The change one JSON item names (anything unreadable: :data:`EVERYTHING`)."""
    if isinstance(item, list) and item and all(isinstance(x, str) for x in item):
        kind, rest = item[0], item[1:]
        if kind == "f" and rest:
            return StoreChange(entity_id=rest[0], facts=True, fact_ids=rest[1:])
        if kind == "s" and len(rest) == 2:
            return StoreChange(entity_id=rest[0], session_id=rest[1])
        if kind == "x" and len(rest) == 1:
            return StoreChange(entity_id=rest[0], forgotten=True)
    return EVERYTHING


def payloads(origin: str, changes: Iterable[StoreChange]) -> list[str]:
    """The notification payloads carrying ``changes`` (repeats sent once), each under
    :data:`PAYLOAD_LIMIT` bytes."""
    head = json.dumps({"o": origin, "c": []}, separators=(",", ":"))
    out: list[str] = []
    batch: list[str] = []
    size = len(head)
    for item in dict.fromkeys(json.dumps(encode(c), separators=(",", ":")) for c in changes):
        if len(head) + len(item.encode()) > PAYLOAD_LIMIT:
            item = '["*"]'
        n = len(item.encode()) + 1
        if batch and size + n > PAYLOAD_LIMIT:
            out.append(_payload(origin, batch))
            batch, size = [], len(head)
        batch.append(item)
        size += n
    if batch:
        out.append(_payload(origin, batch))
    return out


def _payload(origin: str, items: Sequence[str]) -> str:
    return '{"o":' + json.dumps(origin) + ',"c":[' + ",".join(items) + "]}"


def notify(conn: psycopg.Connection, channel: str, origin: str, changes: Sequence[StoreChange]) -> None:
    """Send ``changes`` on ``channel`` from ``conn``'s transaction (delivered on commit)."""
    for payload in payloads(origin, changes):
        conn.execute("SELECT pg_notify(%s, %s)", [channel, payload])


def parse(payload: str, origin: str) -> list[StoreChange]:
    """The changes a payload reports, none for this store object's own (``origin``)."""
    try:
        data = json.loads(payload)
    except ValueError:
        return [EVERYTHING]
    if not isinstance(data, dict) or not isinstance(data.get("c"), list):
        return [EVERYTHING]
    if data.get("o") == origin:
        return []
    out: list[StoreChange] = []
    for change in map(decode, data["c"]):
        last = out[-1] if out else None
        if last is not None and last.fact_ids and change.fact_ids and last.entity_id == change.entity_id:
            # One entity's facts of one write, named one per item: taken in at once.
            out[-1] = attrs.evolve(last, fact_ids=last.fact_ids + change.fact_ids)
        else:
            out.append(change)
    return out


class ChangeListener:
    """A thread holding one connection that LISTENs on the store's channel and hands what
    it hears to ``watchers``.

    After each (re)connection it reports :data:`EVERYTHING` (changes made while it was not
    listening are lost: see the module docstring). A connection that breaks (the server
    restarted, the backend was terminated) is replaced at once, then with growing delays
    (:data:`RECONNECT_DELAYS`); one that goes quiet is pinged every :data:`PING_EVERY`
    seconds, and cut when a ping has no answer in :data:`PING_LIMIT` seconds (a frozen
    network).
    """

    def __init__(
        self,
        conninfo: str,
        connect_kwargs: dict[str, Any],
        *,
        channel: str,
        origin: str,
        watchers: ChangeWatchers,
    ) -> None:
        self._conninfo = conninfo
        self._kwargs = {**connect_kwargs, "autocommit": True, "application_name": APPLICATION_NAME}
        self.channel = channel
        self._origin = origin
        self._watchers = watchers
        self._closed = False
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()
        self._watchdog = Watchdog("memtap-feed")
        #: Set while the listener is connected and listening.
        self.listening = threading.Event()
        #: The server process id of the listening connection (``None`` when not connected).
        self.backend_pid: int | None = None
        #: How many times the listener has (re)connected.
        self.connections = 0
        self._thread = threading.Thread(target=self._run, name="memtap-feed", daemon=True)

    def start(self) -> None:
        """Start listening in the background."""
        self._thread.start()

    def _run(self) -> None:
        failures = 0
        while not self._closed:
            try:
                self._listen()
                failures = 0
            except (psycopg.Error, OSError) as exc:
                if self._closed:
                    return
                if failures == 0:
                    log.warning(
                        "memtap: the change feed lost its PostgreSQL connection (%s); reconnecting "
                        "(caches reload what they hold once it is back)",
                        exc,
                    )
                delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                failures += 1
                time.sleep(delay)
            finally:
                self.listening.clear()
                self.backend_pid = None

    def _listen(self) -> None:
        with psycopg.connect(self._conninfo, **self._kwargs) as conn:
            with self._lock:
                if self._closed:
                    return
                self._conn = conn
            try:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                self.backend_pid = conn.info.backend_pid
                self.connections += 1
                self.listening.set()
                # Whatever was written while this process was not listening is unknown.
                self._watchers.changed([EVERYTHING])
                while not self._closed:
                    heard = False
                    for note in conn.notifies(timeout=PING_EVERY):
                        heard = True
                        self._watchers.changed(parse(note.payload, self._origin))
                    if not heard and not self._closed:
                        with self._watchdog.watch(conn, PING_LIMIT, "checking the change feed"):
                            conn.execute("SELECT 1")
            finally:
                with self._lock:
                    self._conn = None

    def close(self, timeout: float = 2.0) -> None:
        """Stop listening and close the connection. A thread still connecting (to a server
        that does not answer) is not waited for: it is a daemon, and ends at its connect
        timeout without listening."""
        with self._lock:
            self._closed = True
            conn = self._conn
        if conn is not None and cut(conn):  # wakes the thread out of its wait
            self._thread.join(timeout)
        self._watchdog.close()
