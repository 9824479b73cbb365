"""Realistic conversations for testing what memtap injects: a session as memtap stores it and
as the app keeps it, and the next request the way each kind of app sends it.

A turn is a user question, then tool rounds (the assistant calls one or more tools; the app
runs them and sends the results, or moves on without running them, as chat apps often do),
then maybe the assistant's closing answer. memtap stores every message (unanswered calls
included); the app's own copy leaves the unanswered calls out (keeping their text, if any),
since a provider rejects them. Texts and ids are unique, so a repeated message is a bug.

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

from memtap.protocol.model import Message, ToolCall

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

    def __init__(self) -> None:
        #: Every message memtap captured, in order.
        self.stored: list[Message] = []
        #: The conversation as the app keeps and resends it.
        self.app: list[Message] = []
        self._ids = itertools.count()

    def text(self, prefix: str) -> str:
        """A text no other message of the session has."""
        return f"{prefix} {next(self._ids)}"

    def turn(self, rounds: Sequence[Round] = (), closing: bool = True) -> None:
        """Add one turn; a round the app does not answer ends it."""
        question = Message("user", self.text("question"))
        self.stored.append(question)
        self.app.append(question)
        for r in rounds:
            calls = [ToolCall(self.text("call"), "lookup", "{}") for _ in range(r.calls)]
            call = Message("assistant", self.text("thinking") if r.with_text else "", tool_calls=calls)
            self.stored.append(call)
            if not r.answered:
                if r.with_text:
                    self.app.append(Message("assistant", call.content))
                return
            results = [Message("tool", self.text("result"), tool_call_id=c.id) for c in calls]
            self.stored += results
            self.app += [call, *results]
        if closing:
            answer = Message("assistant", self.text("answer"))
            self.stored.append(answer)
            self.app.append(answer)

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
