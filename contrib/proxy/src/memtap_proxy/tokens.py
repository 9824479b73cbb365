"""Proxy tokens: which token admits a request, and as which entities it may act.

``memtap proxy --token T`` is one token for every entity; ``--tokens FILE`` binds tokens to
entities, one ``<token> <entity-glob> [<default-entity>]`` per line. A request carrying a
bound token may act only as entities matching its glob; without an ``x-memtap-entity``
header it acts as the line's default entity, else as the glob itself when the glob is a
plain name, else as the proxy's ``--entity``, which must then match the glob.

The rules live in core (:mod:`memtap.sdk`: ``Grant``, ``TokenTable``, ``parse_tokens``...),
shared with ``memtap mcp``; this module names them for the proxy. Only a SHA-256 digest of
each token is kept, compared in constant time; tokens are never logged, echoed in errors,
or forwarded.
"""

from __future__ import annotations

import hmac  # the comparison the rules use (tests count its calls)

from memtap.sdk import (
    EVERY_ENTITY,
    Grant,
    TokenRule,
    TokensFileError,
    TokenTable,
    load_tokens,
    parse_tokens,
)
from memtap.sdk import token_digest as digest

__all__ = [
    "EVERY_ENTITY",
    "Grant",
    "TokenRule",
    "TokenTable",
    "TokensFileError",
    "digest",
    "hmac",
    "load_tokens",
    "parse_tokens",
]
