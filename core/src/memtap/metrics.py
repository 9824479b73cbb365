"""OpenTelemetry counters for the outcome of every captured call.

``memtap.exchanges.captured`` (calls queued by the capture path), ``.spooled`` (journaled to
the on-disk spool), ``.stored`` (written to the store), ``.replayed`` (stored from a spool a
previous process left), ``.dropped`` (given up: spool or buffer bound reached; attribute
``memtap.reason``), ``.quarantined`` (refused by the store for what they hold, kept in the
quarantine: :mod:`memtap.capture.quarantine`) and ``memtap.failures`` (things that went
wrong without failing the call: ``memtap.reason`` is ``store_write``, ``spool_write``,
``spool_corrupt``, ``format``, ``inject``, ``history_deadline`` (a call went on without
its session's history: the read was late), ``rejected`` (the provider rejected a request
memtap had changed; it was sent again as the app built it), ...). Without an
OpenTelemetry SDK these are no-ops.
"""

from __future__ import annotations

from typing import Any

from memtap import telemetry


class _Counters:
    """The counters, created on first use (the API proxies them until an SDK is set)."""

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}

    def _counter(self, name: str, description: str) -> Any:
        counter = self._made.get(name)
        if counter is None:
            counter = self._made[name] = telemetry.meter().create_counter(
                name, unit="{exchange}", description=description
            )
        return counter

    def add(self, name: str, amount: int, reason: str | None = None) -> None:
        """Add ``amount`` to counter ``memtap.exchanges.<name>`` (or ``memtap.failures``
        for ``name == "failed"``), never raising."""
        if amount <= 0:
            return
        full = "memtap.failures" if name == "failed" else f"memtap.exchanges.{name}"
        try:
            self._counter(full, f"memtap: {name}").add(amount, {"memtap.reason": reason} if reason else None)
        except Exception:  # telemetry must never break memtap
            pass


#: The process's counters.
COUNTERS = _Counters()


def count(name: str, amount: int = 1, reason: str | None = None) -> None:
    """Count ``amount`` outcomes of kind ``name`` (captured, spooled, stored, replayed,
    dropped, quarantined, failed), with an optional reason."""
    COUNTERS.add(name, amount, reason)
