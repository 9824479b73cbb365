"""The durable spool: every captured call is journaled to disk before the call returns, so
that neither a storage outage nor a crashed process (``kill -9``) loses it.

The request thread appends one line of JSON per call (the app's request body and the
response as raw JSON, redacted) to the process's current *segment* file: one ``write(2)``
to the page cache, no fsync. The background writer formats and stores calls as before; once
the store has every call of a segment, the segment is deleted (that is the compaction). A
process that dies leaves its segments behind; the next :class:`memtap.Memory` on the same
store finds them (segments are ``flock``-ed by the live process that owns them, so only a
dead process's segments are taken) and replays them, oldest first. Writes are idempotent by
exchange id, so a call replayed after it had already been stored is not stored twice.

The spool is bounded (``max_bytes``): past the bound the oldest segments are dropped, their
calls counted and logged. A full disk never fails a call: the call is still stored from
memory, just not durably, and the failure is counted.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .anchors import AgentProfile
from .builtins import might_contain_secret, redact_text
from .metrics import count
from .model import Attribution
from .wire import RawExchange, StreamAccumulator, WireProtocol

log = logging.getLogger("memtap.spool")

#: Environment variable: ``off`` disables the spool, a path puts it there.
SPOOL_ENV = "MEMTAP_SPOOL"
#: Format version of spool records.
VERSION = 1
_SUFFIX = ".jsonl"


def spool_dir_for(store_url: str, home: Path) -> Path:
    """The spool directory of one store under ``home`` (named by a hash of the URL, so
    neither the URL nor any password in it is written anywhere)."""
    digest = hashlib.sha256(store_url.encode()).hexdigest()[:20]
    return home / "spool" / digest


def is_ephemeral(store_url: str) -> bool:
    """Whether a store keeps nothing across processes (nothing to replay into)."""
    return store_url.startswith("memory:") or store_url.endswith(":memory:")


def _write(fd: int, data: bytes) -> int:
    """``os.write`` (a seam for fault-injection tests: a full disk, an I/O error)."""
    return os.write(fd, data)


def _fallback(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    return str(obj)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_fallback)


def response_json(obj: Any, to_json: Callable[[Any], Mapping[str, Any] | None]) -> str | None:
    """The wire JSON of an SDK response object, as text: pydantic models serialise
    themselves (fast); anything else goes through ``to_json``."""
    dump_json = getattr(obj, "model_dump_json", None)
    if dump_json is not None:
        try:
            text: str = dump_json(by_alias=True, exclude_unset=True, warnings=False)
            return text
        except TypeError:
            pass
    data = to_json(obj)
    return None if data is None else _dumps(data)


@attrs.define(eq=False)
class Segment:
    """One spool file owned by this process: its open descriptor (holding an ``flock``),
    its size, and how many of its records the store does not have yet."""

    path: Path
    fd: int
    size: int = 0
    records: int = 0
    pending: int = 0
    sealed: bool = False
    dropped: bool = False
    adopted: bool = False


@attrs.define
class SpoolStats:
    """Counters of one spool since it was opened."""

    spooled: int = 0
    failed: int = 0
    dropped: int = 0
    corrupt: int = 0
    adopted: int = 0


def encode_record(
    *,
    call_id: str,
    protocol: str,
    attribution: Attribution,
    started_at: str,
    ended_at: str,
    already_present: int,
    stream: bool,
    error: str | None,
    partial: bool,
    body: Mapping[str, Any],
    response: str | None,
    events: Sequence[str] | None,
    agent: str | None = None,
) -> bytes:
    """One spool line for a finished call, redacted (no credential reaches the disk).
    ``agent`` names the call's agent profile (its scaffolding is left out when the call is
    replayed)."""
    head = _dumps(
        {
            "v": VERSION,
            **({"ag": agent} if agent else {}),
            "id": call_id,
            "p": protocol,
            "a": [attribution.entity_id, attribution.session_id, attribution.process_id],
            "t0": started_at,
            "t1": ended_at,
            "ap": already_present,
            "s": stream,
            "e": error,
            "pa": partial,
            "req": body,
        }
    )
    tail = ',"res":' + (response if response is not None else "null")
    tail += ',"ev":' + ("[" + ",".join(events) + "]" if events is not None else "null") + "}\n"
    line = head[:-1] + tail
    if might_contain_secret(line):
        line = redact_text(line)
    return line.encode()


def journal_call(
    spool: Spool,
    call: Any,
    body: Mapping[str, Any],
    ended_at: _dt.datetime,
    payload: Callable[[], tuple[str | None, list[str] | None]],
    *,
    error: str | None,
    partial: bool,
    stream: bool,
) -> Segment | None:
    """Journal one finished :class:`memtap.tap.Call` (request path; never raises): the
    app's body and the response JSON (``payload``), redacted. Returns the segment, or
    ``None`` if the call could not be journaled (counted and logged)."""
    try:
        response, events = payload()
        line = encode_record(
            call_id=call.id,
            protocol=call.protocol.name,
            attribution=call.attribution,
            started_at=call.started_at.isoformat(),
            ended_at=ended_at.isoformat(),
            already_present=call.already_present,
            stream=stream,
            error=error,
            partial=partial,
            body=body,
            response=response,
            events=events,
            agent=getattr(getattr(call, "profile", None), "name", None),
        )
    except Exception:
        spool.stats.failed += 1
        count("failed", reason="spool_encode")
        log.warning("memtap could not journal a %s call to its spool", call.protocol.name, exc_info=True)
        return None
    segment = spool.append(line)
    if segment is None:
        count("failed", reason="spool_write")
    return segment


def decode_record(
    record: Mapping[str, Any],
    protocols: Mapping[str, WireProtocol],
    accumulator: Callable[[WireProtocol], StreamAccumulator],
    profiles: Mapping[str, AgentProfile] | None = None,
) -> RawExchange:
    """A spool record back as the :class:`RawExchange` the capture path would have made
    (with its agent profile, found by name in ``profiles``). Raises
    ``KeyError``/``ValueError`` for a record this process cannot read (e.g. its protocol's
    plugin is not installed)."""
    name = record["p"]
    protocol = protocols.get(name)
    if protocol is None:
        raise KeyError(f"no installed plugin speaks protocol {name!r}")
    entity, session, process = record["a"]
    stream_result = None
    events = record.get("ev")
    if events is not None:
        acc = accumulator(protocol)
        for event in events:
            if isinstance(event, Mapping):
                acc.feed(event)
        stream_result = acc.result()
    return RawExchange(
        protocol=protocol,
        attribution=Attribution(entity_id=entity, session_id=session, process_id=process),
        request_body=record["req"],
        response=record.get("res"),
        stream_result=stream_result,
        already_present=int(record.get("ap", 0)),
        started_at=_dt.datetime.fromisoformat(record["t0"]),
        ended_at=_dt.datetime.fromisoformat(record["t1"]),
        stream=bool(record.get("s")),
        error=record.get("e"),
        partial=bool(record.get("pa")),
        id=record["id"],
        profile=(profiles or {}).get(record.get("ag") or ""),
    )


class Spool:
    """The on-disk spool of one store, in ``directory``.

    ``max_bytes`` bounds the spool (oldest segments dropped beyond it), ``segment_bytes``
    is the size at which a new segment is started.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = 256 * 1024 * 1024,
        segment_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = max(1024, min(segment_bytes, max_bytes // 4 or 1024))
        self.stats = SpoolStats()
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self._current: Segment | None = None
        self._counter = 0
        self._failing = False
        self._closed = False
        self.directory.mkdir(parents=True, exist_ok=True)
        #: Called with the number of records of segments dropped for the bound.
        self.on_dropped: list[Callable[[int], None]] = []

    # -- the request path ----------------------------------------------------------------

    def append(self, line: bytes) -> Segment | None:
        """Journal one record; return its segment, or ``None`` when it could not be written
        (counted and logged; the call is unaffected)."""
        with self._lock:
            if self._closed:
                return None
            try:
                seg = self._current
                if seg is None or seg.size >= self.segment_bytes:
                    seg = self._rotate()
                try:
                    written = _write(seg.fd, line)
                except OSError:
                    written = -1
                if written != len(line):
                    # A torn record would corrupt the next one too: cut it off again.
                    os.ftruncate(seg.fd, seg.size)
                    raise OSError(errno.ENOSPC, "short write to the spool")
            except OSError as exc:
                self.stats.failed += 1
                if not self._failing:
                    self._failing = True
                    log.warning(
                        "memtap cannot write its spool in %s (%s): calls go on and are stored "
                        "from memory, but would not survive a crash until this is fixed",
                        self.directory,
                        exc,
                    )
                return None
            if self._failing:
                self._failing = False
                log.warning("memtap can write its spool in %s again", self.directory)
            seg.size += len(line)
            seg.records += 1
            seg.pending += 1
            self.stats.spooled += 1
            if self._total() > self.max_bytes:
                self._enforce_bound()
            return seg

    def _total(self) -> int:
        return sum(s.size for s in self._segments)

    def _rotate(self) -> Segment:
        self._counter += 1
        name = f"{time.time_ns():020d}-{os.getpid()}-{self._counter:06d}{_SUFFIX}"
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        seg = Segment(path=path, fd=fd)
        self._segments.append(seg)
        old, self._current = self._current, seg
        if old is not None:
            old.sealed = True
            self._release_if_done(old)
        return seg

    def _enforce_bound(self) -> None:
        dropped = 0
        while self._total() > self.max_bytes and len(self._segments) > 1:
            oldest = self._segments[0]
            if oldest is self._current:
                break
            dropped += oldest.pending
            oldest.dropped = True
            self._unlink(oldest)
        if dropped:
            self.stats.dropped += dropped
            log.warning(
                "memtap spool in %s is over its bound of %d bytes: dropped the %d oldest unstored "
                "call(s) (%d dropped in all)",
                self.directory,
                self.max_bytes,
                dropped,
                self.stats.dropped,
            )
            for callback in self.on_dropped:
                try:
                    callback(dropped)
                except Exception:
                    log.exception("memtap spool on_dropped callback failed")

    # -- the writer ----------------------------------------------------------------------

    def done(self, segments: Sequence[Segment | None]) -> None:
        """The store has the records of these segments (one entry per record)."""
        with self._lock:
            for seg in segments:
                if seg is None or seg.dropped:
                    continue
                seg.pending -= 1
                self._release_if_done(seg)

    def _release_if_done(self, seg: Segment) -> None:
        if seg.pending <= 0 and (seg.sealed or self._closed) and seg is not self._current:
            self._unlink(seg)

    def _unlink(self, seg: Segment) -> None:
        try:
            os.unlink(seg.path)
        except OSError:
            pass
        try:
            os.close(seg.fd)
        except OSError:
            pass
        if seg in self._segments:
            self._segments.remove(seg)
        if seg is self._current:
            self._current = None

    def pending(self) -> int:
        """Records journaled but not yet confirmed stored."""
        with self._lock:
            return sum(s.pending for s in self._segments if not s.dropped)

    # -- start-up replay -----------------------------------------------------------------

    def adopt_orphans(self) -> Iterator[tuple[Segment, dict[str, Any]]]:
        """Take the segments no live process holds (left by a crashed or closed-with-pending
        process), oldest first, and yield their records with the segment now owning them.
        A corrupted line is skipped with a warning naming the file and line."""
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            seg = self._adopt(path)
            if seg is None:
                continue
            records = list(self._read(seg))
            with self._lock:
                seg.records = seg.pending = len(records)
            if not records:
                with self._lock:
                    self._unlink(seg)
                continue
            self.stats.adopted += len(records)
            for record in records:
                yield seg, record

    def _adopt(self, path: Path) -> Segment | None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None  # taken and removed by another process meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None  # a live process owns it
        stat = os.fstat(fd)
        if stat.st_nlink == 0:  # replayed and removed by another process before we locked
            os.close(fd)
            return None
        seg = Segment(path=path, fd=fd, size=stat.st_size, sealed=True, adopted=True)
        with self._lock:
            self._segments.insert(0, seg)
        return seg

    def _read(self, seg: Segment) -> Iterator[dict[str, Any]]:
        with open(os.dup(seg.fd), "rb") as f:
            f.seek(0)
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                    if not isinstance(record, dict) or record.get("v") != VERSION or "id" not in record:
                        raise ValueError("not a memtap spool record")
                except ValueError as exc:
                    self.stats.corrupt += 1
                    log.warning(
                        "memtap spool file %s line %d is corrupted (%s); that record is skipped, "
                        "the rest are replayed",
                        seg.path,
                        number,
                        "truncated" if not raw.endswith(b"\n") else exc,
                    )
                    continue
                yield record

    def close(self) -> None:
        """Close every segment; those whose records are all stored are deleted, the rest stay
        for the next process on this store to replay."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            current, self._current = self._current, None
            if current is not None:
                current.sealed = True
            for seg in list(self._segments):
                if seg.pending <= 0:
                    self._unlink(seg)
                else:
                    try:
                        os.close(seg.fd)
                    except OSError:
                        pass
            self._segments.clear()
