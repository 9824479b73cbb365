"""The server SDK: what a memtap server (``memtap proxy``, ``memtap ui``, ``memtap mcp``)
imports from core, beyond :mod:`memtap.sdk`.

- **who may connect**: :func:`host_name`, :func:`is_loopback_host`, :func:`is_loopback_name`
  (the Host header and bind address checks of a local server);
- **tokens bound to entities**: :class:`TokenTable` (loaded with :func:`load_tokens` or
  :func:`parse_tokens`; :class:`TokensFileError`), :class:`TokenRule`, :class:`Grant`,
  :data:`EVERY_ENTITY`, :func:`token_digest`;
- **the store a server serves**: :data:`STORE_ENV`, :func:`open_existing_memory`;
- **serving**: :class:`ServerThread` (a uvicorn server in a thread, started once it accepts,
  stopped idempotently) and :class:`StopOnSignal` (stop on SIGTERM as on Ctrl-C);
- **answering in time**: :class:`BoundedWork` and :class:`Overdue` (work with a deadline);
- **showing what is stored**: :func:`redact_id`, :func:`term_counts`.

The names in ``__all__`` follow semantic versioning, like :mod:`memtap.sdk`'s.
"""

from __future__ import annotations

from memtap.hosts import host_name, is_loopback_host, is_loopback_name
from memtap.longterm.text import term_counts
from memtap.memory import STORE_ENV, open_existing_memory
from memtap.redact import redact_id
from memtap.tokens import (
    EVERY_ENTITY,
    Grant,
    TokenRule,
    TokensFileError,
    TokenTable,
    load_tokens,
    parse_tokens,
)
from memtap.tokens import digest as token_digest
from memtap.workers.deadline import BoundedWork, Overdue
from memtap.workers.serving import ServerThread, StopOnSignal

__all__ = [  # noqa: RUF022 (grouped as in the docstring, not one alphabetical list)
    # who may connect
    "host_name",
    "is_loopback_host",
    "is_loopback_name",
    # serving in a thread, stopping on a signal
    "ServerThread",
    "StopOnSignal",
    # tokens bound to entities
    "EVERY_ENTITY",
    "Grant",
    "TokenRule",
    "TokenTable",
    "TokensFileError",
    "load_tokens",
    "parse_tokens",
    "token_digest",
    # the store a server serves
    "STORE_ENV",
    "open_existing_memory",
    # answering in time
    "BoundedWork",
    "Overdue",
    # showing what is stored
    "redact_id",
    "term_counts",
]
