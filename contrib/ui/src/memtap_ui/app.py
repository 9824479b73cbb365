"""The memory browser: a Starlette application over one :class:`memtap.Memory`.

Pages are rendered on the server with Jinja2 (autoescaped: every stored text is hostile
input) and use no script. Every link is built from the request's ``root_path``, so the UI
works at ``/`` (``memtap ui``) and under a prefix (``/_memtap/`` of ``memtap proxy --ui``).
Reading the store is blocking: the page functions are plain ``def``, which Starlette runs in
its thread pool.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memtap import Memory

from . import pages
from .guard import UIGuard

HERE = Path(__file__).parent
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

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A page: ``template`` with ``context``, ``root`` (the UI's path prefix) and the
        forms' CSRF token."""
        guard: UIGuard = request.scope["state"]["memtap_ui_guard"]
        html = self.env.get_template(template).render(
            root=request.scope.get("root_path", ""), csrf=guard.csrf_token(), **context
        )
        return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)

    def not_found(self, request: Request, what: str) -> HTMLResponse:
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
        forgotten = request.query_params.get("forgotten")
        shown = len(page.facts) if request.query_params.get("facts") == "all" else FACTS_SHOWN
        return self.render(request, "entity.html", page=page, forgotten=forgotten, shown=shown)

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
        results = self.memory.recall(query, entity_id=entity_id, k=k) if query.strip() else []
        return self.render(request, "recall.html", entity_id=entity_id, query=query, k=k, results=results)

    async def forget(self, request: Request) -> Response:
        """``POST /entities/<id>/forget``: forget one fact (``fact_id``) or everything of
        the entity (``entity=yes``). Needs the form's CSRF token; the guard has already
        refused a request from another origin."""
        entity_id = request.path_params["entity_id"]
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
        if isinstance(fact_id, str) and fact_id:
            count = await run_in_threadpool(self.memory.forget, entity_id=entity_id, fact_id=fact_id)
            url = f"{root}/entities/{_seg(entity_id)}?forgotten={count}"
            return RedirectResponse(url, status_code=303)
        if form.get("entity") == "yes":
            await run_in_threadpool(self.memory.forget, entity_id=entity_id)
            return RedirectResponse(f"{root}/?forgotten={_seg(entity_id)}", status_code=303)
        return self.render(request, "refused.html", status=400, reason="the form names nothing to forget")


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
        Route("/", ui.home),
        Route("/entities/{entity_id:path}/recall", ui.recall),
        Route("/entities/{entity_id:path}/forget", ui.forget, methods=["POST"]),
        Route("/entities/{entity_id:path}", ui.entity),
        Route("/sessions/{session_id:path}", ui.session),
        Route("/exchanges/{exchange_id:path}", ui.exchange),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    return UIGuard(app, token=token, bound_host=bound_host, allow_hosts=allow_hosts, form_key=form_key)
