"""Entity, session and process ids with their secrets replaced by fingerprints; installed
as the data model's id filter on import."""

from __future__ import annotations

import hashlib
import re

from memtap.protocol.model import install_id_filter
from memtap.redact.detectors import MIN_SECRET_CHARS
from memtap.redact.scanner import _SCANNER, _merge
from memtap.redact.text import redact_text

#: How a secret inside an id is written: a fingerprint of it, the same for the same secret.
ID_SECRET_PREFIX = "secret-"
_FINGERPRINT = re.compile(re.escape(ID_SECRET_PREFIX) + "[0-9a-f]{16}")
_IDS: dict[str, str] = {}
_IDS_MAX = 4096


def redact_id(value: str) -> str:
    """An entity, session or process id with every secret in it replaced by a fingerprint
    (``user-ghp_…`` → ``user-secret-1f0c…``): the first 16 hex digits of the secret's
    SHA-256. The same id always maps to the same one, so an app keeps addressing its
    entity with the id it has, and two users' different tokens stay two entities (a plain
    ``[REDACTED]`` would merge them); the secret is never stored. Ids are redacted, not
    refused: an id reaches memtap from headers and agents too, where refusing would fail
    the user's call. Returns ``value`` itself when it holds no secret (the common case:
    one cache lookup)."""
    if len(value) < MIN_SECRET_CHARS or redact_text(value) is value:
        return value
    known = _IDS.get(value)
    if known is not None:
        return known
    out = []
    last = 0
    for start, end in _merge(_SCANNER.spans(value)):
        if start < last or _FINGERPRINT.fullmatch(value, start, end):
            continue  # a fingerprint already (an id read back from the store)
        digest = hashlib.sha256(value[start:end].encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out.append(value[last:start])
        out.append(ID_SECRET_PREFIX + digest)
        last = end
    out.append(value[last:])
    safe = "".join(out)
    if len(_IDS) >= _IDS_MAX:
        _IDS.clear()
    _IDS[value] = safe
    return safe


def redact_optional_id(value: str | None) -> str | None:
    """:func:`redact_id` of an id that may be absent (an attrs converter)."""
    return None if value is None else redact_id(value)


install_id_filter(redact_id)  # ids given to the data model are redacted from now on
