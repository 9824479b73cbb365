"""The quarantine: captured calls a store refused for what they hold (text it cannot encode,
a value too large, a constraint), kept aside so that they never stop the calls behind them.

A refused record is isolated from its batch by the capture writer (the rest of the batch is
stored at once) and written here, redacted like everything memtap keeps, one file per
record, instead of being retried ahead of good records. The quarantine lives in a folder of
its own under memtap's home, keyed by the store's identity as the spool is
(``$MEMTAP_HOME/quarantine/<hash>/``): it works when the store itself refuses, and the next
process on the same store (or ``memtap quarantine``) finds it. Each file is one JSON object
written in ASCII (a lone surrogate stays exactly as it was, ``\\ud800``)::

    {"v": 1, "at": "<when quarantined>", "reason": "<the store's error, redacted>",
     "exchange": {<the exchange as memtap export writes it, redacted>}}

``memtap quarantine`` lists, retries (made storable first: lone surrogates and characters
the store cannot hold become U+FFFD) and drops them; ``memtap stats`` counts them. A store
that keeps nothing across processes (``memory://``) has its quarantine in memory.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from memtap.capture.private import FILE_MODE, make_private, private_dir
from memtap.capture.wholefile import publish_atomically, remove_stale_work
from memtap.protocol.model import Exchange, Fact, from_dict, to_dict, utcnow
from memtap.redact import redact_exchange, redact_fact, redact_text
from memtap.storage.storable import storable, unstorable_characters
from memtap.storage.store import Store, store_identity

log = logging.getLogger("memtap.capture.quarantine")
#: Facts' records are named by this and the fact's id (a fact and a call never share a file).
_FACT_KEY = "fact:"

VERSION = 1
_SUFFIX = ".json"
#: At most this many records are kept; beyond it new refusals are counted and logged only.
MAX_RECORDS = 10_000
#: How much of a store's error is kept as the reason.
_REASON_CHARS = 500


def quarantine_dir_for(identity: str, home: Path) -> Path:
    """The quarantine folder of the store whose identity is ``identity`` (named by a hash,
    as :func:`memtap.capture.spool.spool_dir_for` names the spool)."""
    return home / "quarantine" / hashlib.sha256(identity.encode()).hexdigest()[:20]


@attrs.frozen
class QuarantinedRecord:
    """One refused record: the exchange (redacted), why the store refused it, and when."""

    exchange: Exchange
    reason: str
    at: _dt.datetime


def _file_name(exchange_id: str) -> str:
    # Ids are the app's data here (a hostile one may hold anything): the name is a hash.
    digest = hashlib.sha256(exchange_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return digest + _SUFFIX


class Quarantine:
    """Refused records of one store, in ``directory`` (``None``: kept in this process's
    memory only)."""

    def __init__(self, directory: Path | None, *, max_records: int = MAX_RECORDS) -> None:
        self.directory = directory
        self.max_records = max_records
        self._memory: dict[str, str] = {}
        self._lock = threading.Lock()
        #: Whether work files a killed process left were looked for (once per instance).
        self._swept = False
        #: Records refused but not kept (over the bound, or the folder not writable).
        self.lost = 0

    def put(self, exchange: Exchange, reason: str) -> bool:
        """Keep ``exchange`` (redacted) with ``reason``; ``False`` when it could not be kept
        (logged and counted in :attr:`lost`)."""
        return self._put(exchange.id, lambda: self._encode(exchange, reason))

    def put_fact(self, fact: Fact, reason: str) -> bool:
        """Keep a fact the store refused (redacted) with ``reason``, as ``{"v", "at",
        "reason", "fact"}``; ``False`` when it could not be kept. :meth:`count` counts it;
        :meth:`facts` lists it (:meth:`records` lists captured calls only)."""
        return self._put(_FACT_KEY + fact.id, lambda: self._encode_fact(fact, reason))

    def _put(self, key: str, encode: Callable[[], str]) -> bool:
        try:
            text = encode()
        except Exception:  # an object JSON cannot hold: keep what can be said about it
            log.exception("memtap could not encode a refused record for its quarantine")
            self.lost += 1
            return False
        name = _file_name(key)
        with self._lock:
            if self.count() >= self.max_records:
                self.lost += 1
                log.error(
                    "memtap's quarantine %s is full (%d records): a refused record was not kept; "
                    "inspect them with `memtap quarantine list`, then retry or drop them",
                    self.directory or "(in memory)",
                    self.max_records,
                )
                return False
            if self.directory is None:
                self._memory[name] = text
                return True
            try:
                self._write(name, text)
            except OSError as exc:
                self.lost += 1
                log.error("memtap could not write its quarantine in %s (%s)", self.directory, exc)
                return False
        return True

    @staticmethod
    def _encode(exchange: Exchange, reason: str) -> str:
        record = {
            "v": VERSION,
            "at": utcnow().isoformat(),
            "reason": redact_text(reason, remember=False)[:_REASON_CHARS],
            "exchange": to_dict(redact_exchange(exchange)),
        }
        # ASCII: every character escaped, a lone surrogate included, so that it is kept exactly.
        return json.dumps(record, ensure_ascii=True)

    @staticmethod
    def _encode_fact(fact: Fact, reason: str) -> str:
        record = {
            "v": VERSION,
            "at": utcnow().isoformat(),
            "reason": redact_text(reason, remember=False)[:_REASON_CHARS],
        }
        try:
            record["fact"] = to_dict(redact_fact(fact))
            return json.dumps(record, ensure_ascii=True)
        except (TypeError, ValueError):  # metadata JSON cannot hold (why it was refused): as text
            said = attrs.evolve(fact, metadata={str(k): repr(v) for k, v in fact.metadata.items()})
            record["fact"] = to_dict(redact_fact(said))
            return json.dumps(record, ensure_ascii=True)

    def facts(self) -> list[tuple[Fact, str]]:
        """The facts in quarantine, each with why the store refused it."""
        found = []
        for name in self._names():
            data = self._read(name)
            if data is not None and "fact" in data:
                with contextlib.suppress(KeyError, ValueError, TypeError):
                    found.append((from_dict(data["fact"], Fact), str(data.get("reason", ""))))
        return found

    def _read(self, name: str) -> Any:
        try:
            text = (
                self._memory[name] if self.directory is None else (self.directory / name).read_text("ascii")
            )
            return json.loads(text)
        except (OSError, KeyError, ValueError) as exc:
            log.warning("memtap quarantine file %s cannot be read (%s); it is left as it is", name, exc)
            return None

    def _write(self, name: str, text: str) -> None:
        assert self.directory is not None
        private_dir(self.directory)
        make_private(self.directory)
        if not self._swept:  # what a process killed mid-write left: once, at the first record
            remove_stale_work(self.directory)
            self._swept = True
        data = text.encode("ascii") + b"\n"
        publish_atomically(self.directory / name, lambda f: f.write(data), mode=FILE_MODE)

    def _names(self) -> list[str]:
        if self.directory is None:
            return sorted(self._memory)
        try:
            return sorted(p.name for p in self.directory.iterdir() if p.name.endswith(_SUFFIX))
        except OSError:
            return []

    def count(self) -> int:
        """How many records are in quarantine."""
        return len(self._names())

    def records(self) -> Iterator[QuarantinedRecord]:
        """Every record in quarantine, oldest first (an unreadable file is skipped, logged)."""
        loaded = []
        for name in self._names():
            record = self._load(name)
            if record is not None:
                loaded.append(record)
        loaded.sort(key=lambda r: r.at)
        return iter(loaded)

    def _load(self, name: str) -> QuarantinedRecord | None:
        data = self._read(name)
        if data is None or "fact" in data:  # a fact: listed by facts()
            return None
        try:
            return QuarantinedRecord(
                exchange=from_dict(data["exchange"], Exchange),
                reason=str(data.get("reason", "")),
                at=_dt.datetime.fromisoformat(data["at"]),
            )
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("memtap quarantine file %s cannot be read (%s); it is left as it is", name, exc)
            return None

    def drop(self, exchange_ids: Sequence[str] | None = None) -> int:
        """Delete these records (``None``: all); returns how many were deleted."""
        names = self._names() if exchange_ids is None else [_file_name(i) for i in exchange_ids]
        dropped = 0
        with self._lock:
            for name in names:
                if self.directory is None:
                    dropped += self._memory.pop(name, None) is not None
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / name)
                    dropped += 1
        return dropped

    def retry(self, store: Store, exchange_ids: Sequence[str] | None = None) -> tuple[int, int]:
        """Store these records (``None``: all) one by one, made storable first (lone
        surrogates and characters the store cannot hold become U+FFFD); each one stored
        leaves the quarantine. Returns ``(stored, still refused)``. A store that fails
        otherwise (unavailable) raises, and what was not stored stays."""
        wanted = None if exchange_ids is None else set(exchange_ids)
        refused_characters = unstorable_characters(store)
        stored = failed = 0
        for record in list(self.records()):
            if wanted is not None and record.exchange.id not in wanted:
                continue
            exchange = storable(record.exchange, refused_characters)
            try:
                store.write_exchanges([exchange])
            except Exception as exc:
                if not is_refusal(exc):
                    raise
                failed += 1
                log.warning("memtap quarantine: %s is still refused (%s)", record.exchange.id, exc)
                continue
            self.drop([record.exchange.id])
            stored += 1
        return stored, failed


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the records were refused for what they hold
    (:class:`memtap.errors.RecordRefusedError`, or text the driver could not encode), as
    opposed to a store that is unavailable."""
    from memtap.errors import RecordRefusedError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, RecordRefusedError | UnicodeError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def open_quarantine(store: Store, home: Path) -> Quarantine:
    """The quarantine of ``store`` under ``home`` (in memory for a store that keeps nothing
    across processes). Nothing is created until a record is refused."""
    identity = store_identity(store)
    return Quarantine(None if identity is None else quarantine_dir_for(identity, home))
