"""The request path of one intercepted call: attribution (scope), the tap, session-stable
blocks, and telling a provider's validation rejection
of memtap's addition from its other errors."""
