"""Realistic conversations for testing what memtap injects: a session as memtap stores it and
as the app keeps it, and the next request the way each kind of app sends it.

A turn is a user question, then tool rounds (the assistant calls one or more tools; the app
runs them and sends the results, or moves on without running them, as chat apps often do),
then maybe the assistant's closing answer. memtap stores every message (unanswered calls
included); the app's own copy leaves the unanswered calls out (keeping their text, if any),
since a provider rejects them. Texts and ids are unique, so a repeated message is a bug.
Given ``secrets``, texts hold credentials: memtap's copy has them redacted (as it stores
them), the app's copy has them as said, and resends them so.

Drive it with fixed specs or with a property-testing library (hypothesis builds the specs in
memtap's own tests)::

    session = SessionScript()
    session.turn(rounds=[Round(calls=2, answered=False)], closing=False)
    for style in ("everything", "window", "new"):
        request, new = session.next_request(style, window=6)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from memtap.protocol.model import Message, Role, ToolCall
from memtap.redact import redact_text

__all__ = ["Round", "SessionScript"]


@dataclass(frozen=True)
class Round:
    """One tool round: the assistant makes ``calls`` calls (with some text first when
    ``with_text``); the app answers them all, or (``answered=False``) none."""

    calls: int = 1
    answered: bool = True
    with_text: bool = False


class SessionScript:
    """A session: :attr:`stored` (what memtap stores) and :attr:`app` (the app's own copy)."""

    def __init__(self, secrets: Sequence[str | None] = ()) -> None:
        """``secrets``: the n-th text made says ``secrets[n % len(secrets)]`` (``None``: no
        secret), e.g. credentials from :data:`memtap.testing.secrets.SECRETS`."""
        #: Every message memtap captured, in order (secrets redacted).
        self.stored: list[Message] = []
        #: The conversation as the app keeps and resends it (secrets as said).
        self.app: list[Message] = []
        self._ids = itertools.count()
        self._secrets = list(secrets)

    def text(self, prefix: str) -> str:
        """A text no other message of the session has (as the app says it)."""
        n = next(self._ids)
        secret = self._secrets[n % len(self._secrets)] if self._secrets else None
        return f"{prefix} {n}" if secret is None else f"{prefix} {n}, my credential: {secret} (keep it)"

    def _id(self, prefix: str) -> str:
        return f"{prefix} {next(self._ids)}"

    def _said(
        self, role: Role, prefix: str, calls: Sequence[ToolCall] = (), answers: str | None = None
    ) -> tuple[Message, Message]:
        """A new message as memtap stores it and as the app keeps it."""
        text = self.text(prefix) if prefix else ""
        stored = Message(role, redact_text(text), tool_calls=calls, tool_call_id=answers)
        return stored, Message(role, text, tool_calls=calls, tool_call_id=answers)

    def turn(self, rounds: Sequence[Round] = (), closing: bool = True) -> None:
        """Add one turn; a round the app does not answer ends it."""
        stored, app = self._said("user", "question")
        self.stored.append(stored)
        self.app.append(app)
        for r in rounds:
            calls = [ToolCall(self._id("call"), "lookup", "{}") for _ in range(r.calls)]
            stored, app = self._said("assistant", "thinking" if r.with_text else "", calls)
            self.stored.append(stored)
            if not r.answered:
                if r.with_text:
                    self.app.append(Message("assistant", app.content))
                return
            results = [self._said("tool", "result", answers=c.id) for c in calls]
            self.stored += [stored for stored, _ in results]
            self.app += [app, *(app for _, app in results)]
        if closing:
            stored, app = self._said("assistant", "answer")
            self.stored.append(stored)
            self.app.append(app)

    def pending_calls(self) -> tuple[ToolCall, ...]:
        """The calls of the last stored message, when it is an assistant's unanswered call."""
        last = self.stored[-1] if self.stored else None
        return last.tool_calls if last is not None and last.role == "assistant" else ()

    def next_request(self, style: str, *, window: int = 0) -> tuple[list[Message], list[Message]]:
        """The app's next request and the messages in it that are new: ``"everything"`` (the
        whole conversation again), ``"window"`` (its last ``window`` messages), ``"new"`` (the
        new question only) or ``"results"`` (only results answering the stored pending call)."""
        if style == "results":
            results = [
                Message("tool", self.text("late result"), tool_call_id=c.id) for c in self.pending_calls()
            ]
            return results, results
        new = [Message("user", self.text("new question"))]
        if style == "everything":
            return [*self.app, *new], new
        if style == "window":
            return [*self.app[max(0, len(self.app) - window) :], *new], new
        if style == "new":
            return new, new
        raise ValueError(f"unknown request style {style!r}: everything, window, new or results")
