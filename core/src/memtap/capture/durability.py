"""Wiring the durable spool into a :class:`memtap.Memory`: where it lives, and replaying what
a previous process left in it."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from memtap.capture.accumulation import stream_accumulator
from memtap.capture.spool import SPOOL_ENV, Spool, decode_record, spool_dir_for
from memtap.capture.writer import CapturedCall, CaptureWriter
from memtap.plugins import agent_profiles, wire_protocols
from memtap.protocol.model import Attribution, Exchange
from memtap.protocol.wire import RawExchange, StreamAccumulator, WireProtocol
from memtap.storage.store import Store, store_identity, url_without_password

if TYPE_CHECKING:
    from memtap.plugins import PluginManager

log = logging.getLogger("memtap.capture.spool")

#: What :class:`memtap.Memory`'s ``spool`` argument accepts: ``None`` (the default: on
#: for stores that persist, under ``$MEMTAP_HOME``), ``False`` (off), ``True`` (on, even
#: for an in-memory store), a directory, or a :class:`~memtap.capture.spool.Spool`.
SpoolOption = bool | str | os.PathLike[str] | Spool | None


def open_spool(option: SpoolOption, store: Store, home: Path) -> Spool | None:
    """The spool for a store, or ``None`` when it is off (or cannot be created: logged,
    and memtap goes on without durability). By default it lives under ``home``, in a
    directory keyed by the store's identity (:func:`~memtap.storage.store.store_identity`)."""
    if isinstance(option, Spool):
        return option
    env = os.environ.get(SPOOL_ENV, "").strip()
    if option is False or (option is None and env.lower() in ("off", "0", "false", "no")):
        return None
    legacy = None
    if isinstance(option, (str, os.PathLike)):
        directory = Path(option)
    else:
        identity = store_identity(store)
        if option is None and identity is None:
            return None  # nothing survives the process: nothing to replay into
        root = Path(env).expanduser() if env and env.lower() not in ("on", "1", "true", "yes") else home
        directory = spool_dir_for(identity or url_without_password(store.url), root)
        # Before spools were keyed by identity they were keyed by the URL string.
        legacy = spool_dir_for(store.url, root)
    try:
        spool = Spool(directory)
    except OSError as exc:
        log.warning(
            "memtap cannot create its spool directory %s (%s): captured calls are stored from "
            "memory only and would not survive a crash; set %s to a writable directory",
            directory,
            exc,
            SPOOL_ENV,
        )
        return None
    if legacy is not None and legacy != directory:
        _move_orphans(legacy, directory)
    return spool


def _move_orphans(old: Path, new: Path) -> None:
    """Move the segments no live process holds from ``old`` into ``new`` (to be replayed
    there); ``old`` is removed once empty."""
    if not old.is_dir():
        return
    for path in sorted(old.glob("*.jsonl")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(path, new / path.name)
        except OSError:
            pass  # a live process holds it: it stays (that process stores it)
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        old.rmdir()


def replay_orphans(
    spool: Spool,
    writer: CaptureWriter,
    pm: PluginManager,
    seen: Callable[[Attribution], None] | None = None,
    *,
    count_resent: Callable[[RawExchange], int] | None = None,
    formatted: Callable[[Exchange], None] | None = None,
) -> int:
    """Queue every call an earlier process left in ``spool`` for storage, oldest first;
    return how many (``seen`` is told each call's attribution). They are formatted in the
    writer thread like fresh calls, and stored idempotently (a call that had been stored
    already is not stored twice). A call whose record does not say what it resent of its
    session (counted where it was to be formatted: history off) is counted by
    ``count_resent``; ``formatted`` is told each replayed exchange, in order (the session
    history the next count reads).

    The start-up message tells why they were left: a process that crashed (warning), or one
    that closed normally while its store was down (info); a clean stop leaves nothing."""
    protocols = wire_protocols(pm.hook)
    profiles = {p.name: p for p in agent_profiles(pm.hook)}

    def accumulator(protocol: WireProtocol) -> StreamAccumulator:
        return stream_accumulator(pm.hook, protocol)

    crashed = closed = 0
    for segment, record in spool.adopt_orphans():

        def build(record: dict[str, Any] = record) -> Exchange | None:
            raw = decode_record(record, protocols, accumulator, profiles)
            if record.get("ap", 0) is None and count_resent is not None:
                try:
                    raw = attrs.evolve(raw, already_present=count_resent(raw))
                except Exception:
                    log.warning(
                        "memtap could not tell what a replayed call resent; storing it whole", exc_info=True
                    )
            exchange: Exchange | None = pm.hook.memtap_format_exchange(raw=raw)
            if exchange is not None and formatted is not None:
                formatted(exchange)
            return exchange

        entity, session, process = record.get("a") or (None, None, None)
        attribution = Attribution(
            entity_id=entity or "default", session_id=session or "default", process_id=process
        )
        if seen is not None:
            seen(attribution)
        writer.submit(CapturedCall(build, attribution, segment=segment, replayed=True))
        if segment.closed_cleanly:
            closed += 1
        else:
            crashed += 1
    if crashed:
        log.warning(
            "memtap found %d captured call(s) left unstored by a process that ended without "
            "closing memtap (a crash, a kill, or an exit that skipped atexit); replaying them "
            "from the spool in %s",
            crashed,
            spool.directory,
        )
    if closed:
        log.info(
            "memtap found %d captured call(s) that a previous process could not store before "
            "it closed (its store was unavailable); storing them now from the spool in %s",
            closed,
            spool.directory,
        )
    return crashed + closed
