"""Tokens bound to entities: which token admits a request, and as which entities it may act.

The rules every memtap server that admits requests by token shares (``memtap proxy``,
``memtap mcp``): ``--token T`` is one token for every entity; ``--tokens FILE`` binds tokens to
entities, one ``<token> <entity-glob> [<default-entity>]`` per line (blank lines allowed; a comment runs
from a word starting with ``#`` to the end of its line, so a token cannot start with ``#``)::

    tok-acme-8c1f...   acme:*          acme:bot
    tok-alice-77e0...  alice

A request carrying a bound token may act only as entities matching its glob
(:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[...]``; case-sensitive). When it names no
entity (the proxy's ``x-memtap-entity`` header, an MCP tool's ``entity_id``) it acts as the
line's default entity, else as the glob itself when the glob is a plain name (``alice``),
else as the server's ``--entity``, which must then match the glob.

Only a SHA-256 digest of each token is kept. A presented token is hashed and compared with
:func:`hmac.compare_digest` against every configured digest, without stopping at a match, so
neither the time taken nor the comparison order says which token (or how much of one) matched.
Tokens are never logged, echoed in errors, or forwarded.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import logging
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

import attrs

from memtap.errors import MemtapError

log = logging.getLogger("memtap.tokens")

_WILDCARDS = frozenset("*?[")
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")


class TokensFileError(MemtapError, ValueError):
    """A tokens file that cannot be used (the message names the file and line, never a token)."""


def digest(token: str | bytes) -> bytes:
    """The SHA-256 digest a token is kept and compared as."""
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


@attrs.frozen
class Grant:
    """What an admitted request may do: act as entities matching ``glob`` (``None``: every
    entity); ``default_entity`` is whom it acts as without an ``x-memtap-entity`` header
    (``None``: the server's ``--entity``)."""

    glob: str | None = None
    default_entity: str | None = None
    _pattern: re.Pattern[str] | None = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        pattern = re.compile(fnmatch.translate(self.glob)) if self.glob is not None else None
        object.__setattr__(self, "_pattern", pattern)

    @property
    def every_entity(self) -> bool:
        """Whether this grant is not bound to entities (no token, or ``--token``)."""
        return self.glob is None

    def allows(self, entity: str) -> bool:
        """Whether a request under this grant may act as ``entity``."""
        return self._pattern is None or self._pattern.match(entity) is not None


#: The grant of every request when no token is configured, and of ``--token``.
EVERY_ENTITY = Grant()


@attrs.frozen
class TokenRule:
    """One configured token (as its digest) and its grant; ``line`` is where it was read."""

    token_digest: bytes = attrs.field(repr=False)
    grant: Grant
    line: int = 0


class TokenTable:
    """The configured tokens; :meth:`match` finds a presented token's grant in constant time."""

    def __init__(self, rules: Iterable[TokenRule]) -> None:
        self.rules = tuple(rules)

    def __len__(self) -> int:
        return len(self.rules)

    def match(self, presented: str | bytes | None) -> Grant | None:
        """The grant of ``presented`` (the token a request carries), or ``None``."""
        if presented is None:
            return None
        wanted = digest(presented)
        found: Grant | None = None
        for rule in self.rules:  # every rule is compared: no early exit
            if hmac.compare_digest(wanted, rule.token_digest):
                found = rule.grant
        return found


def parse_tokens(text: str, source: str = "tokens file") -> tuple[TokenRule, ...]:
    """The rules in a tokens file's ``text`` (:class:`TokensFileError` on a malformed line)."""
    rules: list[TokenRule] = []
    seen: dict[bytes, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        fields = raw.split()
        for i, field in enumerate(fields):  # a comment runs from a word starting with `#`
            if field.startswith("#"):
                del fields[i:]
                break
        if not fields:
            continue
        where = f"{source}, line {number}"
        if len(fields) not in (2, 3):
            raise TokensFileError(
                f"{where}: expected `<token> <entity-glob> [<default-entity>]`, found {len(fields)} field(s)"
            )
        token, glob = fields[0], fields[1]
        if not _HEADER_SAFE.fullmatch(token):
            raise TokensFileError(
                f"{where}: the token must be printable ASCII (it is sent in an HTTP header)"
            )
        default = fields[2] if len(fields) == 3 else (glob if not _WILDCARDS & set(glob) else None)
        grant = Grant(glob, default)
        if default is not None and not grant.allows(default):
            raise TokensFileError(f"{where}: the default entity {default!r} does not match {glob!r}")
        key = digest(token)
        if key in seen:
            raise TokensFileError(f"{where}: the same token as on line {seen[key]}")
        seen[key] = number
        rules.append(TokenRule(key, grant, number))
    if not rules:
        raise TokensFileError(f"{source}: no tokens (one `<token> <entity-glob>` per line)")
    return tuple(rules)


def load_tokens(path: str | os.PathLike[str]) -> tuple[TokenRule, ...]:
    """The rules of the tokens file at ``path`` (:class:`TokensFileError` if it cannot be
    read or has a malformed line; a warning when other users may read it)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
        mode = file.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise TokensFileError(f"cannot read the tokens file {file}: {reason}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the tokens file %s can be read by other users: chmod 600 %s", file, file)
    return parse_tokens(text, f"tokens file {file}")
