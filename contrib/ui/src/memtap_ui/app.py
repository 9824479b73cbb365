"""The memory browser: a Starlette application over one :class:`memtap.Memory`.

Pages are rendered on the server with Jinja2 (autoescaped: every stored text is hostile
input) and use no script. Every link is built from the request's ``root_path``, so the UI
works at ``/`` (``memtap ui``) and under a prefix (``/_memtap/`` of ``memtap proxy --ui``).
Reading the store is blocking: each page's work (reading and rendering) runs in a daemon
thread and answers within :data:`PAGE_DEADLINE` (:mod:`memtap.workers.deadline`); recall does not
wait for an entity's vectors, nor more than :data:`RECALL_INDEX_WAIT` for its index.

Entity ids are single path segments (``/`` in an id is written ``%2F``), and the entity
routes are told apart on the raw path: ``/entities/a%2Fb%2Frecall`` is the page of the
entity ``a/b/recall``, ``/entities/a%2Fb/recall`` the recall page of ``a/b``.
"""

from __future__ import annotations

import datetime as _dt
import secrets
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memtap import Memory
from memtap.sdk import to_dict
from memtap.sdk.server import BoundedWork, Overdue, redact_id

from . import pages
from .guard import UIGuard

HERE = Path(__file__).parent
#: Seconds a page may take; a page not done by then answers 503 (its work finishes in the
#: background), and while :data:`SLOW_PAGES` works of one page are overdue, that page is
#: refused without starting another.
PAGE_DEADLINE = 3.0
SLOW_PAGES = 2
#: Seconds the recall page waits for a cold entity's index (words; vectors never waited
#: for), and for the question's vector.
RECALL_INDEX_WAIT = 0.3
RECALL_QUERY_DEADLINE = 0.25
#: Facts and sessions the search page lists at most.
SEARCH_LIMIT = 200
#: Facts an entity page lists (newest first) unless asked for all of them (``?facts=all``).
FACTS_SHOWN = 200
#: Facts the recall playground ranks by default, and at most.
DEFAULT_K = 10
MAX_K = 100
#: The additive parts of a recall score, shown as columns (``ExplainedFact.parts``).
SCORE_PARTS = ("words", "vector", "time", "recency")
#: Why recall left a fact out (``ExplainedFact.reason``), in words.
REASONS = {
    "threshold": "score under the threshold",
    "duplicate": "already in the injected history or memory block",
    "budget": "over the token budget",
    "limit": "k facts injected already",
}
#: Security headers of every page: no framing, no script, nothing from elsewhere.
PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

#: Headers of a page's JSON (``?format=json``): no CSP needed (nothing is rendered).
JSON_HEADERS = {k: v for k, v in PAGE_HEADERS.items() if k != "content-security-policy"}


def _when(value: _dt.datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _seg(value: object) -> str:
    """A value as one URL path segment (``/`` and every reserved character escaped)."""
    return quote(str(value), safe="")


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def make_environment() -> jinja2.Environment:
    """The templates' environment: autoescaped, strict about undefined names."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=_when, seg=_seg, score=_score)
    env.globals.update(parts=SCORE_PARTS, reasons=REASONS)
    return env


class MemoryBrowser:
    """The UI's pages over ``memory`` (see :func:`create_app`)."""

    def __init__(self, memory: Memory, env: jinja2.Environment) -> None:
        self.memory = memory
        self.env = env
        self.bounded = BoundedWork(PAGE_DEADLINE, SLOW_PAGES, name="memtap-ui-page")
        # What a forget offers to forget next (the facts that repeat the forgotten one), by
        # a random key in the redirect's address: the forgotten text is never in a URL.
        self._offers: OrderedDict[str, tuple[str, tuple[str, ...]]] = OrderedDict()
        self._offers_lock = threading.Lock()

    def offer(self, entity_id: str, fact_ids: list[str]) -> str:
        """A key for the facts offered to forget after a forget (the newest 64 kept)."""
        key = secrets.token_urlsafe(12)
        with self._offers_lock:
            self._offers[key] = (entity_id, tuple(fact_ids))
            while len(self._offers) > 64:
                self._offers.popitem(last=False)
        return key

    def offered(self, key: str | None, entity_id: str) -> tuple[str, ...]:
        """The fact ids offered under ``key`` for ``entity_id`` (none if unknown)."""
        with self._offers_lock:
            entity, ids = self._offers.get(key or "", ("", ()))
        return ids if entity == entity_id else ()

    def bounded_page(
        self, name: str, page: Callable[[Request], Response]
    ) -> Callable[[Request], Awaitable[Response]]:
        """``page`` as an endpoint that answers within the deadline (503 after it)."""

        async def endpoint(request: Request) -> Response:
            try:
                return await self.bounded.run(name, page, request)
            except Overdue as late:
                return self.busy(request, late)

        return endpoint

    def busy(self, request: Request, late: Overdue) -> Response:
        """The 503 page of a page not done within the deadline."""
        if late.started:
            reason = f"this page was not ready within {late.deadline:g} s (a large entity or a busy store)"
        else:
            reason = "this page is still being prepared for earlier requests"
        response = self.render(request, "busy.html", status=503, reason=reason)
        response.headers["retry-after"] = "5"
        return response

    async def entities_route(self, request: Request) -> Response:
        """``/entities/...``: the entity page, its recall page or its forget form, told
        apart on the raw path (an id's ``/`` is ``%2F`` there; an id sent with plain
        slashes still works, ``/recall`` and ``/forget`` at its end then being the pages)."""
        entity_id, action = _entity_route(request)
        if action == "forget":
            if request.method != "POST":
                return self.render(request, "refused.html", status=405, reason="forget needs the page's form")
            return await self.forget(request, entity_id)
        if request.method != "GET":
            return self.render(request, "refused.html", status=405, reason="this page is read-only")
        if not entity_id:
            return self.not_found(request, "entity ''")
        request.scope["path_params"] = {"entity_id": entity_id}
        if action == "recall":
            return await self.bounded_page("recall", self.recall)(request)
        return await self.bounded_page("entity", self.entity)(request)

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        """A page: ``template`` with ``context``, ``root`` (the UI's path prefix) and the
        forms' CSRF token; with ``?format=json``, ``context`` as JSON (the model's JSON
        form: :func:`memtap.protocol.model.to_dict`)."""
        if request.query_params.get("format") == "json":
            return JSONResponse(to_dict(context), status_code=status, headers=JSON_HEADERS)
        guard: UIGuard = request.scope["state"]["memtap_ui_guard"]
        html = self.env.get_template(template).render(
            root=request.scope.get("root_path", ""), csrf=guard.csrf_token(), **context
        )
        return Response(html, status_code=status, headers=PAGE_HEADERS, media_type="text/html")

    def not_found(self, request: Request, what: str) -> Response:
        """A 404 page naming what was not found."""
        return self.render(request, "missing.html", status=404, what=what)

    # -- pages ------------------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        """``/``: every entity, most recently active first."""
        return self.render(
            request,
            "entities.html",
            entities=pages.entities(self.memory),
            store=self.memory.url,
            forgotten=request.query_params.get("forgotten"),
        )

    def entity(self, request: Request) -> Response:
        """``/entities/<id>``: facts with their history, retracted facts, sessions."""
        entity_id = request.path_params["entity_id"]
        page = pages.entity(self.memory, entity_id)
        if not page.exists:
            return self.not_found(request, f"entity {entity_id!r}")
        self.memory.longterm.load_soon(redact_id(entity_id))  # for its recall playground
        forgotten = request.query_params.get("forgotten")
        shown = len(page.facts) if request.query_params.get("facts") == "all" else FACTS_SHOWN
        offered = set(self.offered(request.query_params.get("repeats"), entity_id))
        repeats = [row for row in page.facts if row.fact.id in offered]
        return self.render(
            request, "entity.html", page=page, forgotten=forgotten, shown=shown, repeats=repeats
        )

    def session(self, request: Request) -> Response:
        """``/sessions/<id>[?entity=E]``: the session's messages grouped by captured call,
        with what memtap injected into each call."""
        session_id = request.path_params["session_id"]
        entity_id = request.query_params.get("entity") or None
        calls = pages.session_calls(self.memory, session_id, entity_id)
        if not calls:
            return self.not_found(request, f"session {session_id!r}")
        return self.render(
            request,
            "session.html",
            session_id=session_id,
            entity_id=entity_id
            or next((c.exchange.attribution.entity_id for c in calls if c.exchange), None),
            calls=calls,
        )

    def search(self, request: Request) -> Response:
        """``/search?q=...``: facts of every entity holding all the words of ``q``, and the
        sessions whose id or entity holds it."""
        query = request.query_params.get("q", "")[:200]
        found = (
            pages.search(self.memory, query, SEARCH_LIMIT)
            if query.strip()
            else pages.SearchResults((), (), False)
        )
        return self.render(request, "search.html", query=query, found=found, limit=SEARCH_LIMIT)

    def exchange(self, request: Request) -> Response:
        """``/exchanges/<id>``: one captured call, what memtap injected into it and why."""
        exchange_id = request.path_params["exchange_id"]
        explanation = self.memory.explain(exchange_id)
        if explanation is None:
            return self.not_found(request, f"exchange {exchange_id!r}")
        return self.render(request, "exchange.html", x=explanation.exchange, explanation=explanation)

    def recall(self, request: Request) -> Response:
        """``/entities/<id>/recall?q=...&k=...``: the entity's facts ranked for a question,
        with their scores, exactly as :meth:`memtap.Memory.recall` ranks them."""
        entity_id = request.path_params["entity_id"]
        query = request.query_params.get("q", "")
        k = _int(request.query_params.get("k"), DEFAULT_K, 1, MAX_K)
        loading = False
        results: list[Any] = []
        if query.strip():
            # Words now, vectors when they come: an entity imported a moment ago has none,
            # and embedding 20,000 facts for one page took minutes.
            found = self.memory.longterm.recall_soon(
                query,
                entity_id=redact_id(entity_id),
                k=k,
                index_wait=RECALL_INDEX_WAIT,
                deadline=RECALL_QUERY_DEADLINE,
            )
            loading = found is None
            results = found or []
        return self.render(
            request, "recall.html", entity_id=entity_id, query=query, k=k, results=results, loading=loading
        )

    async def forget(self, request: Request, entity_id: str) -> Response:
        """``POST /entities/<id>/forget``: forget one fact (``fact_id``) or everything of
        the entity (``entity=yes``). Needs the form's CSRF token; the guard has already
        refused a request from another origin."""
        form = await request.form()
        guard: UIGuard = request.scope["state"]["memtap_ui_guard"]
        if not guard.valid_csrf(form.get("csrf")):
            return self.render(
                request,
                "refused.html",
                status=403,
                reason="the form's CSRF token is missing or out of date (reload the page and try again)",
            )
        fact_id = form.get("fact_id")
        root = request.scope.get("root_path", "")
        try:
            if isinstance(fact_id, str) and fact_id:
                count, repeats = await self.bounded.run(
                    "forget", pages.forget_fact, self.memory, entity_id, fact_id
                )
                url = f"{root}/entities/{_seg(entity_id)}?forgotten={count}"
                if repeats:
                    url += f"&repeats={self.offer(entity_id, [f.id for f in repeats])}"
                return RedirectResponse(url, status_code=303)
            if form.get("entity") == "yes":
                await self.bounded.run("forget", self.memory.forget, entity_id=entity_id)
                return RedirectResponse(f"{root}/?forgotten={_seg(entity_id)}", status_code=303)
        except Overdue as late:  # the deletion goes on: the page says so
            return self.busy(request, late)
        return self.render(request, "refused.html", status=400, reason="the form names nothing to forget")


_ENTITY_ACTIONS = ("recall", "forget")


def _entity_route(request: Request) -> tuple[str, str | None]:
    """The entity id and the action (``"recall"``, ``"forget"``, ``None``: its page) of an
    ``/entities/...`` request, read from the raw path (where ``%2F`` is not a ``/``)."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(request.scope["path"])
    path = path.split("?", 1)[0]
    root = request.scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    rest = path.split("/entities/", 1)[1] if "/entities/" in path else ""
    parts = rest.split("/")
    if len(parts) > 1 and parts[-1] in _ENTITY_ACTIONS:
        return unquote("/".join(parts[:-1])), parts[-1]
    return unquote(rest), None


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        number = int(value) if value is not None else default
    except ValueError:
        number = default
    return max(low, min(high, number))


def create_app(
    memory: Memory,
    *,
    token: str | None = None,
    bound_host: str | None = None,
    allow_hosts: Iterable[str] = (),
    form_key: bytes | None = None,
) -> UIGuard:
    """The memory browser as an ASGI application over ``memory`` (used as given: the
    caller closes it), behind its :class:`~memtap_ui.guard.UIGuard`: ``token`` required from
    every request when set; without one, only requests for loopback host names,
    ``bound_host`` or ``allow_hosts`` are answered.

    Mount it under a prefix by calling it with the prefix as the scope's ``root_path`` (as
    Starlette's ``Mount`` and ``memtap proxy --ui`` do): every link stays under it.
    ``form_key``: the key of the forms' CSRF token, for processes serving one UI
    (:class:`~memtap_ui.guard.UIGuard`).
    """
    ui = MemoryBrowser(memory, make_environment())
    routes = [
        Route("/", ui.bounded_page("home", ui.home)),
        Route("/entities/{rest:path}", ui.entities_route, methods=["GET", "POST"]),
        Route("/search", ui.bounded_page("search", ui.search)),
        Route("/sessions/{session_id:path}", ui.bounded_page("session", ui.session)),
        Route("/exchanges/{exchange_id:path}", ui.bounded_page("exchange", ui.exchange)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    return UIGuard(app, token=token, bound_host=bound_host, allow_hosts=allow_hosts, form_key=form_key)
