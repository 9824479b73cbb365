"""A streamed call's accumulator: the ``memtap_stream_accumulator`` hook's answer, else the
one default (:func:`memtap.protocol.wire.default_accumulator`, the protocol's own), which
capture's ``accumulator`` plugin gives as the hook's last answer."""

from __future__ import annotations

import pluggy

from memtap.protocol.markers import hookimpl
from memtap.protocol.wire import StreamAccumulator, WireProtocol, default_accumulator

__all__ = ["AccumulatorPlugin", "stream_accumulator"]


def stream_accumulator(hook: pluggy.HookRelay, protocol: WireProtocol) -> StreamAccumulator:
    """A fresh accumulator for one stream in ``protocol``: the ``memtap_stream_accumulator``
    hook's answer (``hook`` is a plugin manager's ``hook``), else the default (the
    ``accumulator`` plugin may be disabled)."""
    found: StreamAccumulator | None = hook.memtap_stream_accumulator(protocol=protocol)
    return found if found is not None else default_accumulator(protocol)


class AccumulatorPlugin:
    """Default ``memtap_stream_accumulator``: :func:`~memtap.protocol.wire.default_accumulator`."""

    @hookimpl(trylast=True)
    def memtap_stream_accumulator(self, protocol: WireProtocol) -> StreamAccumulator:
        """Return the protocol's own accumulator."""
        return default_accumulator(protocol)
