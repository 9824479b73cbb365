"""The durable spool: every captured call is journaled to disk before the call returns, so
that neither a storage outage nor a crashed process (``kill -9``) loses it.

The request thread appends one line of JSON per call (the app's request body and the
response as raw JSON, redacted) to the process's current *segment* file: one ``write(2)``
to the page cache, no fsync (it keeps the GIL, so that no other thread slips in before the
call returns: :mod:`memtap.capture.filewrite`). No secret reaches the disk, and redacting
costs the call little: the request half of a record with new text to scan is redacted and
encoded by a worker thread while the request is in flight (see :class:`RequestJournal`);
when the answer arrives the response half is redacted on the request path, joined to it,
and written in one ``write`` before the call returns. The background writer formats and
stores calls as before; once the store has every call of a segment, the segment is deleted
(that is the compaction). A process that dies leaves its segments behind; the next
:class:`memtap.Memory` on the same store finds them (segments are ``flock``-ed by the live
process that owns them, so only a dead process's segments are taken) and replays them,
oldest first. Writes are idempotent by exchange id, so a call replayed after it had already
been stored is not stored twice.

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
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from memtap.capture.filewrite import append_record
from memtap.capture.private import make_private, private_dir
from memtap.metrics import count
from memtap.protocol.anchors import AgentProfile
from memtap.protocol.json_encoder import encode_json
from memtap.protocol.model import Attribution
from memtap.protocol.wire import RawExchange, StreamAccumulator, WireProtocol
from memtap.redact import (
    dumps_redacted,
    dumps_redacted_record,
    new_text,
    redact_stream,
    redact_stream_events,
    redact_text,
)
from memtap.storage.storable import storable

log = logging.getLogger("memtap.capture.spool")

#: Environment variable: ``off`` disables the spool, a path puts it there.
SPOOL_ENV = "MEMTAP_SPOOL"
#: Format version of spool records (unchanged by the two-halves encoding: a record is the
#: same JSON object, so processes of either version replay each other's spools).
VERSION = 1
_SUFFIX = ".jsonl"
#: A segment renamed so by :meth:`Spool.close`: its process closed normally with calls in
#: it still unstored (the store was down), as opposed to a process that crashed.
_CLOSED_SUFFIX = ".closed" + _SUFFIX
#: A response or stream event as the spool takes it: decoded (what an adapter's ``to_json``
#: returns) or JSON text.
Answer = Mapping[str, Any] | str | None


def spool_dir_for(identity: str, home: Path) -> Path:
    """The spool directory of the store whose :func:`~memtap.storage.store.store_identity` is
    ``identity``, under ``home`` (named by a hash: nothing about the store is written).

    Keyed by what the store *is*, not by the URL that reached it: after a crash, the next
    process replays what is pending even if its URL differs (a rotated password, another
    host name for the same server)."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return home / "spool" / digest


def _write(fd: int, data: bytes) -> int:
    """Write one record (:func:`~memtap.capture.filewrite.append_record`: a small one without
    letting another thread take the GIL before the call returns); a seam for
    fault-injection tests (a full disk, an I/O error)."""
    return append_record(fd, data)


def _fallback(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    return str(obj)


def _dumps(obj: Any) -> bytes:
    return encode_json(obj, _fallback)


@attrs.define(eq=False)
class Segment:
    """One spool file owned by this process: its open descriptor (holding an ``flock``),
    its size, and how many of its records the store does not have yet."""

    path: Path
    fd: int
    size: int = 0
    records: int = 0
    pending: int = 0
    #: Of the pending records, those the store has (kept until memorize is done with
    #: them): dropping the segment for the bound loses no call of theirs.
    stored: int = 0
    #: Writes under way with records of this segment (:meth:`Spool.pin`): the bound does
    #: not drop it until they end.
    pinned: int = 0
    sealed: bool = False
    dropped: bool = False
    adopted: bool = False
    #: Left by a process that closed normally (not one that crashed).
    closed_cleanly: bool = False


@attrs.define
class SpoolStats:
    """Counters of one spool since it was opened."""

    spooled: int = 0
    failed: int = 0
    dropped: int = 0
    corrupt: int = 0
    adopted: int = 0


def encode_head(
    *,
    call_id: str,
    protocol: str,
    attribution: Attribution,
    started_at: str,
    body: Any,
) -> bytes:
    """The request half of a spool record: what is known when the request is sent, the
    app's body redacted (decoded: every string of it, and secret-named keys), as UTF-8
    JSON without its closing brace (:func:`encode_tail` completes it)."""
    head = _dumps(_head_fields(call_id, protocol, attribution, started_at))
    return head[:-1] + b',"req":' + dumps_redacted(body, _fallback)


def _head_fields(call_id: str, protocol: str, attribution: Attribution, started_at: str) -> dict[str, Any]:
    """The request half's fields, but the body."""
    return {
        "v": VERSION,
        "id": call_id,
        "p": protocol,
        "a": [attribution.entity_id, attribution.session_id, attribution.process_id],
        "t0": started_at,
    }


def encode_tail(
    *,
    ended_at: str,
    stream: bool,
    error: str | None,
    partial: bool,
    response: Answer,
    events: Sequence[Answer] | None,
    agent: str | None = None,
    already_present: int | None = 0,
) -> bytes:
    """The response half of a spool record, closing it: the response, redacted, or the
    stream's events, redacted across events (a secret the stream split is found too), each
    given decoded (as the SDK's ``to_json`` returns it) or as JSON text. Small: what the
    model answered. ``agent`` names the call's agent profile (known once the request is
    read; its scaffolding is left out when the call is replayed). ``already_present`` is
    how many of the request's leading messages resend its session; ``None`` when it is
    counted only where the call is formatted (history off:
    :attr:`memtap.protocol.wire.HistoryInjection.resent_later`), and then counted again
    when the record is replayed (records of earlier versions hold it in the request half;
    either is read)."""
    fields = _tail_fields(ended_at, already_present, stream, error, partial, agent)
    return b"," + _with_answer(fields, {}, response, events)[1:]


def _tail_fields(
    ended_at: str,
    already_present: int | None,
    stream: bool,
    error: str | None,
    partial: bool,
    agent: str | None,
) -> dict[str, Any]:
    """The response half's fields, but the answer (:func:`_answer`); the error redacted."""
    fields = {
        "t1": ended_at,
        "ap": already_present,
        "s": stream,
        "e": redact_text(error, remember=False) if error else error,
        "pa": partial,
    }
    if agent:
        fields["ag"] = agent
    return fields


def _with_answer(
    fields: dict[str, Any], parts: dict[str, Any], response: Answer, events: Sequence[Answer] | None
) -> bytes:
    """A record (its end, when ``fields`` are the response half's) as one line: ``fields``,
    then ``parts`` (the request body, when the record is made in one piece) and the response
    or the stream's events, redacted. Decoded answers (what ``to_json`` returns) are
    redacted with the parts, every string scanned in one pass, and the whole line encoded
    once; JSON text given (records of earlier versions) is scanned as text."""
    if type(response) is not str and (events is None or all(type(e) is not str for e in events)):
        fields["ev"] = None if events is None else redact_stream_events(events, _fallback)
        return dumps_redacted_record(fields, {**parts, "res": response}, _fallback) + b"\n"
    head = _dumps(fields)[:-1]
    for name, value in parts.items():
        head += b',"' + name.encode() + b'":' + dumps_redacted(value, _fallback)
    return head + _answer(response, events)


def _answer(response: Answer, events: Sequence[Answer] | None) -> bytes:
    """The end of a record given JSON text: the response or the stream's events, redacted
    (text events among decoded ones decoded first)."""
    if response is None:
        res = b"null"
    elif isinstance(response, str):
        res = redact_text(response, remember=False).encode()
    else:
        res = dumps_redacted(response, _fallback)
    if events is None:
        ev = b"null"
    elif all(type(e) is str for e in events):
        ev = ("[" + ",".join(redact_stream(events)) + "]").encode()  # type: ignore[arg-type]
    else:  # decoded events (text among them decoded too, as redact_stream does)
        objs = [_json_or_text(e) if type(e) is str else e for e in events]
        ev = _dumps(redact_stream_events(objs, _fallback))
    return b',"res":' + res + b',"ev":' + ev + b"}\n"


def _json_or_text(text: str) -> Any:
    """``text`` decoded when it is a JSON object or array, else as it is."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return data if isinstance(data, (dict, list)) else text


def encode_record(
    *,
    call_id: str,
    protocol: str,
    attribution: Attribution,
    started_at: str,
    ended_at: str,
    already_present: int | None,
    stream: bool,
    error: str | None,
    partial: bool,
    body: Mapping[str, Any],
    response: Answer,
    events: Sequence[Answer] | None,
    agent: str | None = None,
) -> bytes:
    """One spool line for a finished call, redacted (no credential reaches the disk), made
    in one piece: what :func:`encode_head` and :func:`encode_tail` write, the fields of both
    in one encoding (the call of a small body, journaled when its answer comes: see
    :func:`journal_request`). ``agent`` names the call's agent profile (its scaffolding is
    left out when the call is replayed)."""
    fields = _head_fields(call_id, protocol, attribution, started_at)
    fields.update(_tail_fields(ended_at, already_present, stream, error, partial, agent))
    return _with_answer(fields, {"req": body}, response, events)


class RequestJournal:
    """The request half of one call's spool record (:func:`encode_head`), made off the
    request path when that pays.

    Why this order: the record must be on disk before the call returns (a ``kill -9``
    right after loses nothing) and must hold no secret, yet redacting and encoding a
    70 KB request body must not delay the call. The body is final when the SDK has built
    it (:meth:`memtap.request.tap.Call.prepare`); from then on the call waits for the network,
    which releases the GIL. So a body with new text to scan is handed to the journal
    worker there, and the worker redacts and encodes it while the request is in flight
    (a body whose text is all known, or small, is cheaper to encode when the answer comes
    than to hand over: :func:`journal_request` decides). When the answer comes,
    :meth:`data` returns the finished half, or encodes it itself if the worker has not
    finished: the request thread never waits for the worker (a thread the OS may not be
    running just then), at worst the work is done twice. Then only the response half is
    redacted on the request path.
    """

    __slots__ = ("_data", "_encode", "_error", "_lock", "body")

    def __init__(self, body: Any, encode: Callable[[], bytes]) -> None:
        self.body = body
        self._encode = encode
        self._lock = threading.Lock()
        self._data: bytes | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        """Encode the half in the worker (skipped if it is done or being done)."""
        if self._data is None and self._lock.acquire(blocking=False):
            try:
                if self._data is None:
                    self._data = self._encode()
            except Exception as exc:
                self._error = exc
            finally:
                self._lock.release()

    def data(self) -> bytes:
        """The encoded half (raises what encoding raised)."""
        data = self._data
        if data is not None:
            return data
        if self._error is not None:
            raise self._error
        data = self._encode()  # not done yet: do not wait for the worker, do it here
        self._data = data
        return data


class _JournalWorker:
    """One daemon thread that encodes request halves in the background (started on first
    use, and again in a forked child, where threads do not survive)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[RequestJournal] = queue.SimpleQueue()
        self._pid = -1
        self._lock = threading.Lock()

    def submit(self, job: RequestJournal) -> None:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._queue = queue.SimpleQueue()
                    threading.Thread(target=self._run, name="memtap-journal", daemon=True).start()
                    self._pid = os.getpid()
        self._queue.put(job)

    def _run(self) -> None:
        jobs = self._queue
        while True:
            job = jobs.get()
            try:
                job.run()
            except Exception:  # pragma: no cover - run() keeps its own errors
                log.debug("journal worker error", exc_info=True)


_WORKER = _JournalWorker()
#: A request body with fewer characters of text redaction has not seen yet is encoded when
#: the answer comes (tens of µs); handing it to the worker would cost more (a thread
#: wake-up, and sharing the GIL with the request while it is sent).
AHEAD_MIN_CHARS = 4096


def _request_journal(call: Any, body: Any) -> RequestJournal:
    """The request half of ``call``'s record, to be encoded (what it needs is read now)."""
    fields = {
        "call_id": call.id,
        "protocol": call.protocol.name,
        "attribution": call.attribution,
        "started_at": call.started_at.isoformat(),
    }
    return RequestJournal(body, lambda: encode_head(body=body, **fields))


def journal_request(spool: Spool | None, call: Any, body: Any) -> RequestJournal | None:
    """Start the request half of ``call``'s spool record in the background (request path:
    costs a queue put), when the body has enough new text for that to pay. ``None`` when
    there is no spool, or the body is small or known: the whole record is then encoded at
    once when the answer comes (:func:`journal_call`)."""
    if spool is None or new_text(body, AHEAD_MIN_CHARS) < AHEAD_MIN_CHARS:
        return None
    job = _request_journal(call, body)
    try:
        _WORKER.submit(job)
    except Exception:  # no thread to be had: the request thread encodes it at the end
        log.debug("memtap journal worker unavailable", exc_info=True)
    return job


def journal_call(
    spool: Spool,
    call: Any,
    body: Mapping[str, Any],
    ended_at: _dt.datetime,
    payload: Callable[[], tuple[Answer, Sequence[Answer] | None]],
    *,
    error: str | None,
    partial: bool,
    stream: bool,
) -> Segment | None:
    """Journal one finished call (request path; never raises; ``call`` is a
    :class:`memtap.capture.finished.FinishedCall`, or anything with its fields): the
    request half made ahead (:func:`journal_request`) joined to the response half
    (``payload``: the response or the stream's events, decoded or as JSON text), redacted,
    in one write. Returns the segment, or ``None`` if the call could not be journaled
    (counted and logged)."""
    try:
        job: RequestJournal | None = getattr(call, "journal", None)
        response, events = payload()
        agent = getattr(getattr(call, "profile", None), "name", None)
        present = None if getattr(call, "resent_later", ()) else call.already_present
        answer: dict[str, Any] = {
            "ended_at": ended_at.isoformat(),
            "stream": stream,
            "error": error,
            "partial": partial,
            "response": response,
            "events": events,
            "agent": agent,
            "already_present": present,
        }
        try:
            line = _call_line(call, call.attribution, body, answer, job)
        except UnicodeEncodeError:
            # Text UTF-8 cannot hold (a lone surrogate, which JSON allows): journaled as it
            # will be stored, with U+FFFD in its place.
            answer.update(response=storable(response), events=storable(events), error=storable(error))
            line = _call_line(call, storable(call.attribution), storable(body), answer, None)
    except Exception:
        spool.stats.failed += 1
        count("failed", reason="spool_encode")
        log.warning("memtap could not journal a %s call to its spool", call.protocol.name, exc_info=True)
        return None
    segment = spool.append(line)
    if segment is None:
        count("failed", reason="spool_write")
    return segment


def _call_line(
    call: Any,
    attribution: Attribution,
    body: Mapping[str, Any],
    answer: dict[str, Any],
    job: RequestJournal | None,
) -> bytes:
    """One finished call's spool line: the request half made ahead (when ``job`` holds
    this body) joined to the response half, else the whole record at once."""
    if job is not None and job.body is body:  # the request half was handed to the worker
        return job.data() + encode_tail(**answer)
    # a small body (or prepare() never ran, or saw another body): all at once
    return encode_record(
        call_id=call.id,
        protocol=call.protocol.name,
        attribution=attribution,
        started_at=call.started_at.isoformat(),
        body=body,
        **answer,
    )


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
        already_present=int(record.get("ap") or 0),
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
        private_dir(self.directory)
        make_private(self.directory)
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
        os.fchmod(fd, 0o600)  # exactly, whatever the umask
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
            if oldest is self._current or oldest.pinned:
                break  # oldest first: a segment being written holds the ones after it too
            dropped += oldest.pending - oldest.stored
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

    def pin(self, segments: Sequence[Segment | None]) -> None:
        """A write of these segments' records (one entry per record) is under way: the bound
        drops none of them (nor a newer one) until :meth:`unpin`, so that a call is never
        both counted as dropped and stored."""
        with self._lock:
            for seg in segments:
                if seg is not None:
                    seg.pinned += 1

    def unpin(self, segments: Sequence[Segment | None]) -> None:
        """The write :meth:`pin` announced has ended (stored or not); the bound is kept
        again."""
        with self._lock:
            for seg in segments:
                if seg is not None:
                    seg.pinned -= 1
            if not self._closed and self._total() > self.max_bytes:
                self._enforce_bound()

    def stored(self, segments: Sequence[Segment | None]) -> None:
        """The store has these records (one entry per record), which stay pending until
        :meth:`done` with ``stored=True`` (memorize is done with them)."""
        with self._lock:
            for seg in segments:
                if seg is not None and not seg.dropped:
                    seg.stored += 1

    def done(self, segments: Sequence[Segment | None], *, stored: bool = False) -> None:
        """These records (one entry per record) need no replay any more: stored and done
        with (``stored``: :meth:`stored` was told), or given up."""
        with self._lock:
            for seg in segments:
                if seg is None or seg.dropped:
                    continue
                seg.pending -= 1
                if stored:
                    seg.stored -= 1
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
        seg = Segment(
            path=path,
            fd=fd,
            size=stat.st_size,
            sealed=True,
            adopted=True,
            closed_cleanly=path.name.endswith(_CLOSED_SUFFIX),
        )
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
                    self._mark_closed(seg)
                    try:
                        os.close(seg.fd)
                    except OSError:
                        pass
            self._segments.clear()

    @staticmethod
    def _mark_closed(seg: Segment) -> None:
        """Rename a segment left with unstored calls at a normal close, so that the next
        process tells it from one a crash left (still under this process's lock)."""
        if seg.path.name.endswith(_CLOSED_SUFFIX):
            return
        target = seg.path.with_name(seg.path.name[: -len(_SUFFIX)] + _CLOSED_SUFFIX)
        try:
            os.rename(seg.path, target)
            seg.path = target
        except OSError:
            pass  # reported as a crash's leftover then: nothing is lost
