"""The public facade, :class:`Memory`, and the composition root: core's default plugins, each
from the room that owns its job, are put together here (:func:`default_plugins`,
:func:`memory_plugins`) and handed to the plugin manager (:func:`plugin_manager`)."""

from __future__ import annotations

import atexit
import datetime as _dt
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import attrs

from memtap.capture.accumulation import AccumulatorPlugin
from memtap.capture.durability import SpoolOption, open_spool, replay_orphans
from memtap.capture.explanation import explain as explain_exchange
from memtap.capture.formatting import PayloadPlugin, RedactPlugin
from memtap.capture.private import make_private
from memtap.capture.quarantine import open_quarantine
from memtap.capture.writer import CapturedCall, CaptureWriter
from memtap.errors import (
    ForkedMemoryError,
    StoreError,
    StoreLockedError,
    UnknownStoreURLError,
    UnsupportedClientError,
    install_hint,
)
from memtap.formats.content import given_messages
from memtap.formats.scaffolding import own_view
from memtap.history.conversation import resent_count
from memtap.history.injector import HistoryBudget, SessionHistories
from memtap.history.known_sessions import KnownSessions
from memtap.history.plugin import HistoryPlugin
from memtap.longterm.embedding import Embedder, EmbedderOption, resolve_embedder
from memtap.longterm.facts import LongTermMemory
from memtap.longterm.index import TOMBSTONE
from memtap.longterm.litellm_embedder import LiteLLMEmbedderPlugin
from memtap.longterm.memorize import LLMOption, resolve_llm
from memtap.longterm.recall import RecallEngine, RecallStats
from memtap.longterm.recall_injector import RecallBudget, RecallPlugin
from memtap.longterm.remember_tool import ToolFormat
from memtap.plugins import PluginManager, make_plugin_manager, wire_protocols
from memtap.protocol.anchors import AgentProfile
from memtap.protocol.model import (
    CONTEXT_KEY,
    DEFAULT_ENTITY_ID,
    DEFAULT_SESSION_ID,
    Attribution,
    Exchange,
    Explanation,
    Fact,
    Message,
    ScoredFact,
    SessionInfo,
    aware,
    utcnow,
)
from memtap.protocol.wire import RawExchange, WireProtocol
from memtap.redact import guard_loggers, redact_exchange, redact_id, redact_optional_id, redact_url
from memtap.request.scope import AttributionScopes
from memtap.request.tap import Tap
from memtap.storage.changes import CacheFollower
from memtap.storage.plugin import MemoryStorePlugin
from memtap.storage.storable import storable, unstorable_characters
from memtap.storage.store import Store, as_store_url, exchange_messages, require_existing_store
from memtap.storage.waiting import WaitingStore

log = logging.getLogger("memtap")

STORE_ENV = "MEMTAP_STORE"
HOME_ENV = "MEMTAP_HOME"
REGISTRATION_ATTR = "_memtap_registration"
#: Where a derived client keeps the function restoring it (see ``Memory._register_derived``).
_RESTORE_ATTR = "_memtap_restore"

C = TypeVar("C")


def default_plugins() -> dict[str, object]:
    """Core's stateless default plugins by name, fresh instances in registration order
    (every plugin manager registers them: :func:`plugin_manager`). Each lives in the room
    whose job it does."""
    return {
        "payload": PayloadPlugin(),
        "redact": RedactPlugin(),
        "accumulator": AccumulatorPlugin(),
        "memory-store": MemoryStorePlugin(),
        "litellm-embedder": LiteLLMEmbedderPlugin(),
    }


def memory_plugins(
    histories: SessionHistories,
    history_budget: HistoryBudget,
    recall_engine: RecallEngine,
    recall_budget: RecallBudget,
) -> dict[str, object]:
    """The default injectors of one :class:`Memory` by name, bound to its session
    histories and recall engine (it registers them once those exist)."""
    return {
        "history": HistoryPlugin(histories, history_budget),
        "recall": RecallPlugin(recall_engine, histories, history_budget, recall_budget),
    }


def plugin_manager(*, entry_points: bool = True, extra: Iterable[object] = ()) -> PluginManager:
    """A plugin manager with core's defaults (:func:`default_plugins`), the installed
    plugins (unless ``entry_points`` is false, as in tests) and ``extra`` plugin objects."""
    return make_plugin_manager(defaults=default_plugins(), entry_points=entry_points, extra=extra)


def memtap_home() -> Path:
    """``$MEMTAP_HOME``, else ``~/.local/share/memtap``."""
    raw = os.environ.get(HOME_ENV)
    return Path(raw).expanduser() if raw else Path.home() / ".local" / "share" / "memtap"


def default_store_url() -> str:
    """``$MEMTAP_STORE``, else a DuckDB file under :func:`memtap_home`."""
    return as_store_url(os.environ.get(STORE_ENV) or f"duckdb:///{memtap_home() / 'memtap.duckdb'}")


def _inside(store: Store, home: Path) -> bool:
    """Whether the store's files are under ``home`` (a DuckDB file there)."""
    path = getattr(store, "path", None)
    return isinstance(path, str) and home in Path(path).parents


def open_store(url: str, pm: PluginManager) -> Store:
    """Open ``url`` with the first storage plugin that accepts it."""
    store: Store | None = pm.hook.memtap_open_store(url=url)
    if store is None:
        schemes = sorted({s for group in pm.hook.memtap_store_schemes() for s in group})
        scheme = url.split(":", 1)[0] if ":" in url else url
        raise UnknownStoreURLError(
            f"no installed memtap storage plugin accepts {scheme!r} URLs ({redact_url(url)!r}). "
            f"Installed schemes: {', '.join(schemes) or 'none'}. Install the plugin for it "
            f"(e.g. {install_hint('memtap-duckdb')} for duckdb:///path, "
            f"{install_hint('memtap-postgres')} for postgresql://...) or use one of those."
        )
    return store


def open_existing_memory(store: str | None = None) -> Memory:
    """A :class:`Memory` on an existing store (``store``: a URL or a ``.duckdb`` path, else
    the default), for tools that serve or read one (``memtap ui``): a missing store raises
    :class:`~memtap.storage.store.StoreNotFoundError` rather than becoming a new empty one,
    and one another process holds raises :class:`~memtap.errors.StoreLockedError` (naming the
    ways out) rather than being waited for."""
    url = as_store_url(store) if store else default_store_url()
    require_existing_store(url)
    return Memory(open_store(url, plugin_manager()))


def open_or_wait(url: str, pm: PluginManager) -> Store:
    """:func:`open_store`, failing open when another process holds the store (a DuckDB
    file): a :class:`~memtap.storage.waiting.WaitingStore` that opens it once it frees,
    meanwhile calls are journaled to the spool (logged once, naming the ways out)."""
    try:
        return open_store(url, pm)
    except StoreLockedError as exc:
        log.warning(
            "memtap: %s. Until it frees, this app's calls run without memory, are journaled to "
            "the spool and stored once it frees",
            exc,
        )
        return WaitingStore(url, lambda: open_store(url, pm), exc)


@attrs.define
class _Registration:
    #: Returns the client: a closure holding it, or a weak reference for a derived client.
    ref: Callable[[], Any]
    restore: Callable[[], None]
    provider: str
    #: ``id()`` of the registered client this one was derived from (``with_options()``).
    parent: int | None = None

    @property
    def client(self) -> Any:
        """The registered client (``None``: a derived client that is gone)."""
        return self.ref()


class Memory:
    """Long-term memory for LLM calls.

    ``store`` is a store URL (``duckdb:///path``, ``duckdb:///:memory:``,
    ``postgresql://...``, ``memory://``) or a :class:`~memtap.storage.store.Store`; by default
    ``$MEMTAP_STORE``, else a DuckDB file under ``$MEMTAP_HOME``. Calls made outside any
    :meth:`scope` are attributed to ``entity_id``/``session_id`` (``"default"`` both).
    ``history`` bounds the injected conversation history.

    ``spool`` makes captured calls durable: each is journaled to an on-disk spool before the
    call returns, so a storage outage or a crash (even ``kill -9``) loses nothing; the next
    Memory on the same store replays what was left. By default it is on for stores that
    persist, under ``$MEMTAP_HOME/spool`` (``$MEMTAP_SPOOL``: ``off`` or a directory);
    ``False`` turns it off, a path puts it there.

    Facts (:meth:`remember`, :meth:`recall`) are found by words and by meaning: ``embedder``
    is an :class:`~memtap.longterm.embedding.Embedder`, a spec (``"minilm"``,
    ``"litellm:<model>"``), ``False`` for none, or ``None`` for ``$MEMTAP_EMBEDDER`` else
    the installed local default. ``recall`` bounds the facts injected into each call
    (:class:`RecallBudget`; ``k=0`` turns injection off). ``llm`` is the port memorize uses
    to learn facts from each stored exchange (an object with ``complete(prompt) -> str``,
    sync or async, or a litellm model name; default ``$MEMTAP_MEMORIZE_MODEL``, else off;
    :class:`~memtap.LiteLLMPort` points it at any endpoint; a model name without litellm
    installed is one warning here, and off);
    ``episodes`` keeps the conversation's turns (the user's, and the model's answers) as
    recallable episodes, each indexed with the turns around it (default: when there is no
    ``llm``).

    ``agent`` names the agent profile (hook ``memtap_agent_profiles``, e.g. ``"claude-code"``
    from memtap-agents) whose system-prompt slots injected blocks are placed at; by default
    the profile is recognised from each request's system prompt, and ``"generic"`` puts
    every block at its fallback point.

    ``format_in_caller`` is for servers that format each call themselves once its answer
    is written (``memtap proxy``): see :attr:`format_in_caller`. Such integrations, which
    drive calls themselves through :attr:`tap`, also use :meth:`wire_protocols`,
    :meth:`agent_profiles`, :meth:`warm_up`, :meth:`recall_stats` and :attr:`embedder`.
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        entity_id: str = DEFAULT_ENTITY_ID,
        session_id: str = DEFAULT_SESSION_ID,
        process_id: str | None = None,
        history: HistoryBudget | None = None,
        plugins: Iterable[object] = (),
        entry_points: bool = True,
        spool: SpoolOption = None,
        embedder: EmbedderOption = None,
        recall: RecallBudget | None = None,
        llm: LLMOption = None,
        episodes: bool | None = None,
        agent: str | None = None,
        format_in_caller: bool = False,
    ) -> None:
        self.pm = plugin_manager(entry_points=entry_points, extra=plugins)
        home = memtap_home()
        guard_loggers()  # the plugins just loaded have their loggers now
        if store is None:
            store = default_store_url()
        elif isinstance(store, str):
            store = as_store_url(store)  # a plain path to a .duckdb file is a DuckDB store
        self.store: Store = open_or_wait(store, self.pm) if isinstance(store, str) else store
        self.default_attribution = Attribution(
            entity_id=entity_id, session_id=session_id, process_id=process_id
        )
        #: This Memory's attribution: its defaults and the scopes opened on it.
        self.scopes = AttributionScopes(self.default_attribution)
        self.history_budget = history or HistoryBudget()
        #: The sessions the store has (read once in the background): a new session's first
        #: call does not wait for a store read.
        watch_sessions = getattr(self.store, "watch_sessions", None)
        self.known_sessions = KnownSessions(
            getattr(self.store, "session_keys", None), exclusive=watch_sessions is not None
        )
        if watch_sessions is not None:  # every session written, by any code, becomes known
            watch_sessions(lambda entity_id, session_id: self.known_sessions.add((entity_id, session_id)))
        self.known_sessions.start()
        self.histories = SessionHistories(self._load_history, known=self.known_sessions)
        #: The durable spool (``None`` when off).
        self.spool = open_spool(spool, self.store, home)
        if (self.spool is not None and home in self.spool.directory.parents) or _inside(self.store, home):
            make_private(home)  # conversations live here: this user's only (an older one was 0755)
        #: Captured calls the store refused for what they hold (:mod:`memtap.capture.quarantine`).
        self.quarantine = open_quarantine(self.store, home)
        refused_characters = unstorable_characters(self.store)
        self.writer = CaptureWriter(
            self.store.write_exchanges,
            spool=self.spool,
            format_in_caller=format_in_caller,
            storable=lambda exchange: storable(exchange, refused_characters),
            quarantine=self.quarantine,
            probe=lambda: self.store.exchange("memtap-probe"),
        )
        port = resolve_llm(llm)
        #: Facts: storage, recall index, memorize worker, recall injector.
        self.longterm = LongTermMemory(
            self.store,
            embedder=resolve_embedder(embedder, self.pm),
            llm=port,
            episodes=port is None if episodes is None else episodes,
            quarantine=self.quarantine,
        )
        self.writer.memorize = self.longterm.memorize
        self.pm.register_builtins(
            memory_plugins(
                self.histories, self.history_budget, self.longterm.engine, recall or RecallBudget()
            )
        )
        self.tap = Tap(
            hook=self.pm.hook,
            scopes=self.scopes,
            histories=self.histories,
            writer=self.writer,
            register_client=self._register_inner,
            register_derived=self._register_derived,
            spool=self.spool,
            agent=agent,
        )
        if self.spool is not None:
            replay_orphans(
                self.spool,
                self.writer,
                self.pm,
                lambda a: self.known_sessions.add(self.histories.key(a)),
                count_resent=self._count_replayed_resent,
                formatted=self._replayed,
            )
        self._registrations: dict[int, _Registration] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._follow_store_changes()
        ref = weakref.ref(self)

        def close_at_exit() -> None:
            memory = ref()
            if memory is not None:
                memory.close()

        self._atexit = close_at_exit
        atexit.register(close_at_exit)

    @property
    def forked(self) -> bool:
        """Whether this process is a fork of the one that created this Memory: its clients'
        calls pass through without memory here, and reading or writing memory raises
        :class:`~memtap.ForkedMemoryError` (create the Memory after the fork)."""
        return os.getpid() != self.tap.pid

    def _refuse_if_forked(self, what: str) -> None:
        if self.forked:
            raise ForkedMemoryError.refusing(what, self.tap.pid, os.getpid())

    def _count_replayed_resent(self, raw: RawExchange) -> int:
        """What a replayed call resent of its session, counted as its own process would
        have (the record did not say: history was off), against the session as read from
        the store and the calls replayed before it (the capture writer, in order)."""
        own = own_view(raw.profile, raw.protocol.read_request(raw.request_body)).messages
        return resent_count(self.histories.get(raw.attribution), own)

    def _replayed(self, exchange: Exchange) -> None:
        """A replayed call joins its session's cached history (for the next one's count)."""
        messages = exchange_messages(exchange)
        self.histories.append(exchange.attribution, lambda: messages)

    @property
    def format_in_caller(self) -> bool:
        """Whether a finished call is formatted (turned into its exchange) in the thread
        that finishes it, not in the background writer. For a server whose answer is
        written by then, or that formats each call itself once it is
        (``Call.format_after_answer``, ``Call.format_captured``: the proxy, which finishes
        a call before its last bytes to journal it first): the work is done while the
        client reads, instead of in a thread that competes for the GIL with the next
        request, and the writer wakes once per batch, not per call. Off by default: an
        app's thread goes back to the app at once."""
        return self.writer.format_in_caller

    @format_in_caller.setter
    def format_in_caller(self, value: bool) -> None:
        self.writer.format_in_caller = value

    @property
    def url(self) -> str:
        """The store's URL for display, its password and secret parameters masked
        (:func:`memtap.redact.redact_url`); the store keeps the real one."""
        return redact_url(self.store.url)

    def _follow_store_changes(self) -> None:
        """On a store with a change feed (``watch_changes``: :mod:`memtap.storage.changes`), keep
        the caches current with what other processes write: recall indexes and session
        histories are read again in the background, an entity forgotten elsewhere is
        dropped from every cache at once."""
        watch_changes = getattr(self.store, "watch_changes", None)
        if watch_changes is None:
            return
        engine = self.longterm.engine
        # Weak: the store (and its feed thread) must not keep a dropped Memory alive.
        ref = weakref.ref(self)

        def session_changed(entity_id: str, session_id: str) -> None:
            memory = ref()
            if memory is not None:
                memory.known_sessions.add((entity_id, session_id))
                memory.histories.refresh(entity_id, session_id)

        def forgotten(entity_id: str) -> None:
            memory = ref()
            if memory is not None:
                memory._drop_cached(entity_id)

        def refresh_all() -> None:
            memory = ref()
            if memory is not None:
                memory.histories.refresh()
                memory.longterm.engine.refresh()

        watch_changes(
            CacheFollower(
                refresh_facts=engine.take_in,
                refresh_session=session_changed,
                forgotten=forgotten,
                refresh_all=refresh_all,
            )
        )

    def _drop_cached(self, entity_id: str) -> None:
        """Forget what the caches hold of an entity (its data is being deleted)."""
        self.histories.drop(entity_id=entity_id)
        self.tap.session_blocks.drop(entity_id=entity_id)
        self.longterm.forget(entity_id)

    def _load_history(self, attribution: Attribution, limit: int) -> list[Message]:
        return self.store.history(attribution.session_id, entity_id=attribution.entity_id, limit=limit)

    # -- registration --------------------------------------------------------------------

    def register(self, client: C) -> C:
        """Patch an SDK client (or a module such as ``litellm``) so its calls get memory.

        Idempotent; returns ``client``. Raises :class:`~memtap.UnsupportedClientError`
        naming the installed providers when no plugin recognises the client.
        """
        self._refuse_if_forked("register()")
        with self._lock:
            if self._closed:
                raise StoreError("this Memory is closed; create a new memtap.Memory to register clients")
            known = self._registrations.get(id(client))
            if known is not None:
                if known.parent is not None:  # derived: now registered in its own right
                    self._registrations[id(client)] = attrs.evolve(known, ref=_holder(client), parent=None)
                return client
            owner = getattr(client, REGISTRATION_ATTR, None)
            if owner is not None and owner() is not None and owner() is not self:
                raise ValueError(
                    "this client is already registered with another memtap.Memory; call "
                    "unregister(client) on that one first"
                )
            adapter = self.pm.hook.memtap_match_client(client=client)
            if adapter is None:
                raise UnsupportedClientError.for_client(client, self.providers())
            restore = adapter.install(client, self.tap)
            try:
                setattr(client, REGISTRATION_ATTR, weakref.ref(self))
            except (AttributeError, TypeError):
                pass
            self._registrations[id(client)] = _Registration(_holder(client), restore, adapter.provider)
        # Calls are coming: load the embedder's model and the default entity's facts now,
        # in the background, rather than when the first one needs them.
        self.longterm.warm_up()
        self._preload_recall(self.default_attribution.entity_id)
        return client

    def _register_inner(self, client: Any) -> Callable[[], None]:
        with self._lock:
            already = id(client) in self._registrations
            self.register(client)
        if already:
            return lambda: None
        return lambda: self.unregister(client)

    def _register_derived(self, parent: Any, client: Any) -> None:
        """Tap ``client``, made from the registered ``parent`` (``parent.with_options(...)``,
        ``parent.copy()``), like its parent. memtap holds it weakly (an app may derive a
        client per request), and unregistering the parent unregisters it too."""
        with self._lock:
            if self._closed or id(parent) not in self._registrations or id(client) in self._registrations:
                return
            adapter = self.pm.hook.memtap_match_client(client=client)
            if adapter is None:
                return
            key = id(client)
            registrations = self._registrations

            def gone(ref: weakref.ref[Any]) -> None:
                # No lock: this may run from the garbage collector in any thread.
                reg = registrations.get(key)
                if reg is not None and reg.ref is ref:
                    registrations.pop(key, None)

            try:
                ref = weakref.ref(client, gone)
            except TypeError:
                log.warning("memtap cannot hold a %s weakly: a client made so is not tapped", type(client))
                return
            restore = adapter.install(client, self.tap)
            # The restore function refers to the client: kept on the client (collected with
            # it), never in this Memory.
            try:
                setattr(client, _RESTORE_ATTR, restore)
                setattr(client, REGISTRATION_ATTR, weakref.ref(self))
            except (AttributeError, TypeError):
                restore()
                return

            def restore_derived() -> None:
                derived = ref()
                undo = vars(derived).pop(_RESTORE_ATTR, None) if derived is not None else None
                if undo is not None:
                    undo()

            registrations[key] = _Registration(ref, restore_derived, adapter.provider, parent=id(parent))

    def unregister(self, client: Any) -> Any:
        """Restore a registered client's original methods (no-op if not registered), and
        those of the clients derived from it."""
        with self._lock:
            reg = self._registrations.pop(id(client), None)
            derived = [
                r.client for r in self._registrations.values() if reg is not None and r.parent == id(client)
            ]
        if reg is not None:
            reg.restore()
            try:
                delattr(client, REGISTRATION_ATTR)
            except AttributeError:
                pass
        for child in derived:
            if child is not None:
                self.unregister(child)
        return client

    def wire_protocols(self) -> dict[str, WireProtocol]:
        """The wire protocols of the loaded plugins (hook ``memtap_wire_protocols``), by
        name (``"openai.chat"``...): what a server routing HTTP requests reads bodies with."""
        return wire_protocols(self.pm.hook)

    def agent_profiles(self) -> list[AgentProfile]:
        """The agent profiles of the loaded plugins (hook ``memtap_agent_profiles``), in the
        order they are tried (:func:`memtap.protocol.anchors.detect_profile`); the ones this
        Memory's calls use."""
        return list(self.tap.profiles)

    def providers(self) -> list[str]:
        """Names of the installed provider plugins (those that can match clients)."""
        names = []
        for impl in self.pm.hook.memtap_match_client.get_hookimpls():
            names.append(impl.plugin_name)
        return sorted(names)

    # -- attribution ---------------------------------------------------------------------

    def scope(
        self,
        *,
        entity_id: str | None = None,
        process_id: str | None = None,
        session_id: str | None = None,
    ) -> AbstractContextManager[Attribution]:
        """Attribute this Memory's calls made inside the ``with`` block (per thread and asyncio
        task). The scope belongs to this Memory: another Memory's calls keep their own.
        The entity's facts start loading for recall in the background (a first call waits
        for them a bounded time)."""
        self._preload_recall(entity_id)
        return self.scopes.scope(entity_id=entity_id, process_id=process_id, session_id=session_id)

    def _preload_recall(self, entity_id: str | None) -> None:
        """Start loading ``entity_id``'s recall index in the background (fail open)."""
        if entity_id is None or self._closed or self.forked:
            return
        try:
            self.longterm.engine.indexes.get(entity_id, wait=False)
        except Exception:
            log.debug("memtap could not start loading the facts of %r", entity_id, exc_info=True)

    def current_attribution(self) -> Attribution:
        """The attribution a call made here and now through this Memory would get."""
        return self.scopes.current()

    # -- reading and writing memory -----------------------------------------------------

    def history(self, session_id: str | None = None, *, entity_id: str | None = None) -> list[Message]:
        """A session's stored messages, oldest first (pending writes are flushed first).

        ``session_id`` defaults to the current scope's session; ``entity_id`` filters.
        """
        self._refuse_if_forked("history()")
        self.flush()
        session_id, entity_id = redact_optional_id(session_id), redact_optional_id(entity_id)
        if session_id is None:
            attribution = self.current_attribution()
            session_id = attribution.session_id
            entity_id = entity_id or attribution.entity_id
        return self.store.history(session_id, entity_id=entity_id)

    def sessions(self, *, entity_id: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """Stored sessions, most recently active first."""
        self._refuse_if_forked("sessions()")
        self.flush()
        return self.store.sessions(entity_id=redact_optional_id(entity_id), limit=limit)

    def exchanges(self, *, session_id: str | None = None, entity_id: str | None = None) -> list[Exchange]:
        """Stored exchanges (captured calls), oldest first, each with its id and what memtap
        injected into it (``Exchange.injected``); filtered by session and entity (pending
        writes are flushed first). Without filters: every exchange of the store."""
        self._refuse_if_forked("exchanges()")
        self.flush()
        return list(
            self.store.exchanges(
                entity_id=redact_optional_id(entity_id), session_id=redact_optional_id(session_id)
            )
        )

    def explain(self, exchange_id: str) -> Explanation | None:
        """Why the model saw what it saw in one captured call: the exchange and each block
        memtap injected into it (the history turns; the recalled facts with their score and
        score parts, and the facts recall considered but left out, with the reason), or
        ``None`` when no exchange has that id. Pending writes are flushed first.

        An exchange captured before this was recorded (or into which nothing was injected)
        has an explanation without blocks."""
        self._refuse_if_forked("explain()")
        self.flush()
        return explain_exchange(self.store, exchange_id)

    def capture(
        self,
        input: Sequence[Message | Mapping[str, Any]] | str,
        output: Sequence[Message | Mapping[str, Any]] | str,
        *,
        entity_id: str | None = None,
        session_id: str | None = None,
        process_id: str | None = None,
        provider: str = "app",
        model: str | None = None,
        at: _dt.datetime | None = None,
    ) -> Exchange:
        """Capture a conversation turn that did not go through a registered client (what
        framework integrations such as the LangChain middleware use, or an import of an
        existing transcript).

        ``input`` and ``output`` are lists of :class:`Message` or of ``{"role", "content"}``
        dicts, or one text each (the user's, the assistant's); anything else raises
        :class:`TypeError` saying what to give. Attribution comes from the current scope,
        overridden by the arguments. ``at`` is when the turn happened (default: now; a naive
        time is UTC): the exchange's time and that of the episodes made from it. The turn is
        redacted, added to the session's history and stored in the background like any
        captured call; storage problems never raise here.
        """
        self._refuse_if_forked("capture()")
        inputs = given_messages(input, "user", "capture(input=...)")
        outputs = given_messages(output, "assistant", "capture(output=...)")
        when = aware(at) if at is not None else utcnow()
        current = self.current_attribution()
        attribution = Attribution(
            entity_id=entity_id or current.entity_id,
            session_id=session_id or current.session_id,
            process_id=process_id if process_id is not None else current.process_id,
        )
        exchange = redact_exchange(
            Exchange(
                attribution=attribution,
                provider=provider,
                operation="chat",
                input=inputs,
                output=outputs,
                request_model=model,
                response_model=model,
                started_at=when,
                ended_at=when,
            )
        )
        item = CapturedCall(lambda: exchange, attribution)
        self.histories.append(attribution, lambda: exchange_messages(exchange))
        self.writer.submit(item)
        return exchange

    def remember(
        self,
        text: str,
        *,
        entity_id: str | None = None,
        process_id: str | None = None,
        context: str | None = None,
        at: _dt.datetime | None = None,
    ) -> Fact:
        """Store a fact about an entity (the current scope's by default). ``context`` is
        text indexed with the fact (with less weight) so recall finds it by those words
        too, but never shown as the fact: the turns around a remembered turn, who said it,
        where. ``at`` is when it was true or said (default: now; a naive time is UTC).
        Secrets in the text and context are redacted before they are stored (the returned
        fact is what was stored)."""
        self._refuse_if_forked("remember()")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("remember() needs the fact as a non-empty string")
        if context is not None and not isinstance(context, str):
            raise TypeError("remember(context=...) takes the context as a string")
        attribution = self.current_attribution()
        fact = Fact(
            entity_id=entity_id or attribution.entity_id,
            process_id=process_id if process_id is not None else attribution.process_id,
            text=text.strip(),
            created_at=aware(at) if at is not None else utcnow(),
            metadata={CONTEXT_KEY: context.strip()} if context and context.strip() else {},
        )
        return self.longterm.remember(fact)

    def recall(
        self,
        query: str,
        *,
        entity_id: str | None = None,
        process_id: str | None = None,
        k: int = 5,
        min_score: float = 0.0,
        deadline: float | None = None,
        now: _dt.datetime | None = None,
    ) -> list[ScoredFact]:
        """An entity's ``k`` facts most relevant to ``query``, best first, with scores in
        [0, 1] (BM25 and vector similarity fused, recency breaking ties). With
        ``process_id``, only that process's facts and facts of no process. With
        ``deadline`` (seconds, for request paths) recall never waits for a cold index
        (``[]``, loaded in the background) or a late query embedding (words only).

        A time the question names ("yesterday", "last week", "in May 2023") ranks the
        facts said then, or speaking of then, first; ``now`` is when the question is asked
        (default: now; a naive time is UTC). See docs/time-in-recall.md."""
        self._refuse_if_forked("recall()")
        entity = redact_optional_id(entity_id) or self.current_attribution().entity_id
        return self.longterm.recall(
            query,
            entity_id=entity,
            process_id=process_id,
            k=k,
            min_score=min_score,
            deadline=deadline,
            now=now,
        )

    @property
    def embedder(self) -> Embedder | None:
        """The embedder recall uses (``None``: recall by words only)."""
        return self.longterm.engine.embedder

    def warm_up(self) -> None:
        """Start loading the embedder's model in the background (calls are coming), so that
        no request waits for it. Registering a client does this too."""
        self.longterm.warm_up()

    def recall_stats(self) -> RecallStats:
        """Recall's counters since this Memory started (a snapshot): searches, those made
        by words only, with a quick query vector, while the model was loading..."""
        return attrs.evolve(self.longterm.engine.stats)

    def facts(self, *, entity_id: str | None = None, process_id: str | None = None) -> list[Fact]:
        """An entity's current facts, newest first."""
        self._refuse_if_forked("facts()")
        entity = redact_optional_id(entity_id) or self.current_attribution().entity_id
        return self.longterm.facts(entity_id=entity, process_id=redact_optional_id(process_id))

    def memory_tool(self, fmt: ToolFormat = "openai") -> dict[str, Any]:
        """The ``remember`` tool to give an agent (memorize mode B), in the ``"openai"``
        (Chat Completions), ``"openai.responses"`` or ``"anthropic"`` format."""
        return self.longterm.tool(fmt)

    def handle_memory_tool(
        self, args: Mapping[str, Any] | str, *, entity_id: str | None = None, process_id: str | None = None
    ) -> Fact:
        """Store what the agent's ``remember`` call asked (arguments as a mapping or JSON
        text), for the current scope's entity. Raises :class:`memtap.longterm.remember_tool.MemoryToolError`
        (a ``ValueError``) with a message for the agent when the arguments are invalid."""
        self._refuse_if_forked("handle_memory_tool()")
        attribution = self.current_attribution()
        return self.longterm.handle_tool(
            args,
            entity_id=redact_optional_id(entity_id) or attribution.entity_id,
            process_id=redact_optional_id(process_id) if process_id is not None else attribution.process_id,
        )

    def forget(self, *, entity_id: str, fact_id: str | None = None) -> int:
        """Delete all of an entity's data (sessions, exchanges, messages, facts); returns
        how many exchanges and facts were deleted.

        With ``fact_id``, delete only that fact of the entity, with the earlier versions it
        replaced and the records of their retraction (the conversation it came from stays:
        forget the entity to delete that too); returns how many facts were deleted (0: the
        entity has no such fact). Needs a store with ``forget_facts`` (every bundled one)."""
        self._refuse_if_forked("forget()")
        if not entity_id:
            raise ValueError("forget() needs the entity_id whose data to delete")
        entity_id = redact_id(entity_id)
        self.flush()
        if fact_id is not None:
            return self._forget_fact(entity_id, fact_id)
        self._drop_cached(entity_id)
        try:
            return self.store.forget(entity_id=entity_id)
        finally:
            self.longterm.forget(entity_id)

    def _forget_fact(self, entity_id: str, fact_id: str) -> int:
        forget_facts = getattr(self.store, "forget_facts", None)
        if forget_facts is None:
            raise StoreError(f"this store ({self.url}) cannot delete one fact; forget the entity instead")
        every = {f.id: f for f in self.store.facts(entity_id=entity_id, include_superseded=True)}
        doomed: set[str] = set()
        fact = every.get(fact_id)
        while fact is not None and fact.id not in doomed:  # the fact, then what it replaced
            doomed.add(fact.id)
            fact = every.get(fact.supersedes) if fact.supersedes else None
        doomed |= {f.id for f in every.values() if f.kind == TOMBSTONE and f.supersedes in doomed}
        if not doomed:
            return 0
        try:
            return int(forget_facts(entity_id=entity_id, fact_ids=sorted(doomed)))
        finally:
            self.longterm.forget(entity_id)  # the cached index is loaded again without them

    def stats(self) -> dict[str, int]:
        """Row counts of the store."""
        self._refuse_if_forked("stats()")
        self.flush()
        return self.store.stats()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until captured calls are stored and memorized (facts learned from them
        stored); ``False`` if that did not happen in time. In a fork of the process that
        created this Memory, ``True`` at once: nothing is captured there."""
        if self.forked:
            return True
        stored = self.writer.flush(timeout)
        return self.longterm.flush(timeout) and stored

    def close(self, timeout: float | None = 10.0) -> None:
        """Flush, restore every registered client and close the store. Idempotent. In a
        fork of the process that created this Memory, only marks it closed: its store,
        spool and threads are the parent's, which closing them here would break."""
        if self.forked:
            self._closed = True
            atexit.unregister(self._atexit)
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            regs = list(self._registrations.values())
        for reg in regs:
            registered = reg.client
            if registered is not None:
                self.unregister(registered)
        self.writer.close(timeout)
        self.longterm.close(timeout)
        self.histories.close()
        self.known_sessions.close()
        if self.spool is not None:
            self.spool.close()  # what is still unstored stays on disk for the next start
        try:
            self.store.close()
        finally:
            atexit.unregister(self._atexit)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"memtap.Memory({self.url!r})"

    def registered(self) -> Iterator[tuple[Any, str]]:
        """The registered clients and their providers."""
        for reg in list(self._registrations.values()):
            registered = reg.client
            if registered is not None:
                yield registered, reg.provider


def _holder(client: Any) -> Callable[[], Any]:
    """A strong reference to ``client``, called like a weak one."""
    return lambda: client
