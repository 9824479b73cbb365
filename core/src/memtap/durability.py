"""Wiring the durable spool into a :class:`memtap.Memory`: where it lives, and replaying what
a previous process left in it."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .capture import CapturedCall, CaptureWriter
from .model import Attribution, Exchange
from .spool import SPOOL_ENV, Spool, decode_record, is_ephemeral, spool_dir_for
from .wire import StreamAccumulator, WireProtocol

if TYPE_CHECKING:
    from .plugins import PluginManager

log = logging.getLogger("memtap.spool")

#: What :class:`memtap.Memory`'s ``spool`` argument accepts: ``None`` (the default: on
#: for stores that persist, under ``$MEMTAP_HOME``), ``False`` (off), ``True`` (on, even
#: for an in-memory store), a directory, or a :class:`~memtap.spool.Spool`.
SpoolOption = bool | str | os.PathLike[str] | Spool | None


def open_spool(option: SpoolOption, store_url: str, home: Path) -> Spool | None:
    """The spool for a store, or ``None`` when it is off (or cannot be created: logged,
    and memtap goes on without durability)."""
    if isinstance(option, Spool):
        return option
    env = os.environ.get(SPOOL_ENV, "").strip()
    if option is False or (option is None and env.lower() in ("off", "0", "false", "no")):
        return None
    if isinstance(option, (str, os.PathLike)):
        directory = Path(option)
    else:
        if option is None and is_ephemeral(store_url):
            return None
        root = Path(env).expanduser() if env and env.lower() not in ("on", "1", "true", "yes") else home
        directory = spool_dir_for(store_url, root)
    try:
        return Spool(directory)
    except OSError as exc:
        log.warning(
            "memtap cannot create its spool directory %s (%s): captured calls are stored from "
            "memory only and would not survive a crash; set %s to a writable directory",
            directory,
            exc,
            SPOOL_ENV,
        )
        return None


def replay_orphans(spool: Spool, writer: CaptureWriter, pm: PluginManager) -> int:
    """Queue every call a dead process left in ``spool`` for storage, oldest first; return
    how many. They are formatted in the writer thread like fresh calls, and stored
    idempotently (a call that had been stored already is not stored twice)."""
    protocols: dict[str, WireProtocol] = {}
    for group in pm.hook.memtap_wire_protocols():
        for protocol in group or ():
            protocols.setdefault(protocol.name, protocol)

    profiles = {p.name: p for group in pm.hook.memtap_agent_profiles() for p in group or ()}

    def accumulator(protocol: WireProtocol) -> StreamAccumulator:
        found: StreamAccumulator | None = pm.hook.memtap_stream_accumulator(protocol=protocol)
        return found if found is not None else protocol.new_accumulator()

    queued = 0
    for segment, record in spool.adopt_orphans():

        def build(record: dict[str, Any] = record) -> Exchange | None:
            raw = decode_record(record, protocols, accumulator, profiles)
            exchange: Exchange | None = pm.hook.memtap_format_exchange(raw=raw)
            return exchange

        entity, session, process = record.get("a") or (None, None, None)
        attribution = Attribution(
            entity_id=entity or "default", session_id=session or "default", process_id=process
        )
        writer.submit(CapturedCall(build, attribution, segment=segment, replayed=True))
        queued += 1
    if queued:
        log.warning(
            "memtap found %d captured call(s) a previous process did not store (crash or "
            "storage outage); replaying them from the spool in %s",
            queued,
            spool.directory,
        )
    return queued
