"""Who a proxied request belongs to, and whether it gets the session's history.

The rule, first match wins (the agent profiles read their agent's own traffic; see
``docs/proxy.md``, Attribution):

- entity: ``x-memtap-entity``, else the profile's ``entity_id(headers, body)``, else the
  proxy's ``--entity``;
- session: ``x-memtap-session``; else the id the agent sends itself (the profile's
  ``session_id(headers, body)``: Claude Code's session, Codex's thread); else the proxy's
  ``--session`` when one is set; else a session derived from the conversation itself
  (its messages up to its first request's last user message, without the agent's
  scaffolding: :class:`DerivedSessions`), so that a new conversation never lands in
  another one's session, even when every conversation opens with the same boilerplate;
- history is injected into a session the user named (header or ``--session``), and into
  one an agent names only when the agent does not resend its whole conversation every
  turn (``keeps_conversation``); a derived session never gets any (two conversations that
  open with the same words share it). What a request repeats of its session is recognised
  either way, and neither injected nor captured twice.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs

from memtap.sdk import Attribution, RequestView

from .headers import MEMTAP_PREFIX, RawHeaders

#: Attribution values longer than this are cut.
MAX_ATTRIBUTION = 200
#: Prefix of the sessions derived from a conversation's first message.
DERIVED_PREFIX = "conv-"


@attrs.frozen
class Attributed:
    """One request's attribution, where its session came from (``header``, ``agent``,
    ``config`` or ``derived``), and whether history is injected."""

    attribution: Attribution
    session_source: str
    history: bool


def memtap_headers(headers: RawHeaders) -> dict[bytes, str]:
    """The ``x-memtap-*`` headers (lower-case names; the first of each counts)."""
    found: dict[bytes, str] = {}
    for name, raw in headers:
        if name[:9].lower() == MEMTAP_PREFIX:
            low = name.lower()
            if low not in found:
                found[low] = raw.decode("latin-1").strip()[:MAX_ATTRIBUTION]
    return found


def header_map(headers: RawHeaders) -> dict[str, str]:
    """Every header as lower-case name -> first value (what profiles read)."""
    out: dict[str, str] = {}
    for name, raw in headers:
        key = name.decode("latin-1").lower()
        if key not in out:
            out[key] = raw.decode("latin-1")
    return out


def derived_session(agent: str, view: RequestView) -> str:
    """A session named after the conversation: its agent and first user message (first
    message of any kind when it has no user message). The same for every request of one
    conversation, whatever it resends."""
    first = next((m for m in view.messages if m.role == "user"), None)
    if first is None and view.messages:
        first = view.messages[0]
    seed = f"{agent}\0{first.role}\0{first.content}" if first is not None else agent
    return DERIVED_PREFIX + hashlib.blake2b(seed.encode("utf-8", "replace"), digest_size=8).hexdigest()


class DerivedSessions:
    """Sessions derived from conversations, telling a conversation's own first turn from
    boilerplate every conversation of an agent opens with (aider's few-shot examples).

    A conversation is named after its messages up to its first request's last user
    message, remembered (the newest :data:`DERIVED_MEMO` of them): a later request of the
    conversation resends that prefix, and is found by it; a new conversation that opens
    with the same boilerplate differs at its own first words. A conversation whose first
    request is not remembered (the proxy restarted) is named after its earliest prefix
    remembered from then on. With a single first user message, the session is
    :func:`derived_session`'s.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._known: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def session(self, agent: str, view: RequestView) -> str:
        """The derived session of ``view`` (its messages without the agent's scaffolding)."""
        hasher = hashlib.blake2b(agent.encode("utf-8", "replace"), digest_size=8)
        prefixes: list[str] = []
        for m in view.messages:
            hasher.update(f"\0{m.role}\0{m.content}".encode("utf-8", "replace"))
            if m.role == "user":
                prefixes.append(hasher.copy().hexdigest())
        if not prefixes:
            return derived_session(agent, view)
        with self._lock:
            for digest in prefixes:
                if digest in self._known:
                    self._known.move_to_end(digest)
                    return DERIVED_PREFIX + digest
            newest = prefixes[-1]
            self._known[newest] = None
            while len(self._known) > self._size:
                self._known.popitem(last=False)
        return DERIVED_PREFIX + newest


def _profile_value(
    profile: Any, method: str, headers: Mapping[str, str], body: Mapping[str, Any]
) -> str | None:
    read = getattr(profile, method, None)
    if not callable(read):
        return None
    value = read(headers, body)
    if not isinstance(value, str):
        return None
    return value.strip()[:MAX_ATTRIBUTION] or None


def attribute(
    raw_headers: RawHeaders,
    body: Mapping[str, Any],
    view: RequestView,
    profile: Any,
    *,
    agent: str,
    entity_id: str,
    session_id: str | None,
    process_id: str | None,
    derived: DerivedSessions | None = None,
) -> Attributed:
    """Attribute one request (see the module docstring). ``view`` is the request without
    the agent's scaffolding; ``entity_id``/``session_id``/``process_id`` are the proxy's
    settings (``session_id=None``: none set); ``derived`` names derived sessions (else
    :func:`derived_session`)."""
    given = memtap_headers(raw_headers)
    entity = given.get(b"x-memtap-entity")
    session = given.get(b"x-memtap-session")
    source = "header"
    if profile is not None and (not entity or not session):
        agent_headers = header_map(raw_headers)
        if not entity:
            entity = _profile_value(profile, "entity_id", agent_headers, body)
        if not session:
            session, source = _profile_value(profile, "session_id", agent_headers, body), "agent"
    if not session and session_id:
        session, source = session_id, "config"
    if not session:
        named = derived.session(agent, view) if derived is not None else derived_session(agent, view)
        session, source = named, "derived"
    # The agent's own session: history only for an agent that does not resend it all.
    keeps = getattr(profile, "keeps_conversation", False)
    history = not keeps if source == "agent" else source != "derived"
    return Attributed(
        attribution=Attribution(
            entity_id=entity or entity_id,
            session_id=session,
            process_id=given.get(b"x-memtap-process") or process_id,
        ),
        session_source=source,
        history=history,
    )
