"""Secret redaction: credentials found in text, JSON and URLs are replaced before anything
is stored, spooled, exported, traced or logged.

A room of its own, above ``storage/`` (which needs none of it) and below every room that
redacts (``history/``, ``capture/``, ``longterm/``...); it imports only the contracts
(``protocol/``: the data model, the JSON encoder, the names secrets go by). One module per
job:

- :mod:`~memtap.redact.validators`: what a matched text must also be (machine-made, not a
  placeholder, decodable credentials, a session cookie);
- :mod:`~memtap.redact.detectors`: the credential formats and where a secret may start;
- :mod:`~memtap.redact.assignments`: secrets by their key (``password=...``, ``--token``,
  HAR cookies);
- :mod:`~memtap.redact.scanner`: all of them compiled into one pattern per pivot
  character, run once over a text;
- :mod:`~memtap.redact.caches`: what is remembered between calls (texts scanned before);
- :mod:`~memtap.redact.text`, :mod:`~memtap.redact.structures`,
  :mod:`~memtap.redact.streams`: redacting a text, JSON data, a stream's events;
- :mod:`~memtap.redact.dumps`: redacted compact JSON for the spool;
- :mod:`~memtap.redact.records`: an exchange, a fact; :mod:`~memtap.redact.ids`: ids;
- :mod:`~memtap.redact.log_filter`: the logging filter.

Public API, all importable from ``memtap.redact``: :func:`redact_text`, :func:`redact_json`,
:func:`redact_url`, :func:`redact_exchange`, :func:`redact_fact`, :func:`find_secrets`,
:data:`REDACTED` and :class:`RedactingFilter` (for loggers); for the spool,
:func:`redact_stream_events`, :func:`dumps_redacted_record` and :func:`encode_json`.
:func:`redact_url` and :func:`key_kind` live in :mod:`memtap.protocol.secret_names`,
:func:`encode_json` and :func:`compact_encoder` in :mod:`memtap.protocol.json_encoder`
(storage and the spool use them without depending on redaction).

**Why not a detector library.** Yelp's detect-secrets (the best known, last released in
2024) scans a line with every plugin's regexes in turn and reports values, not positions:
on this machine it took 1.1 s for 70 KB of agent text, where a request must cost well under
a millisecond, and its patterns start with word boundaries that JSON escapes defeat (the
defect this package fixes). trufflehog/gitleaks are Go binaries; hyperscan and Aho-Corasick
bindings are compiled dependencies that still need the per-format rules. The formats are
public (the providers document their prefixes), so the rules are written here, tested one
by one against a corpus of fake keys and a corpus of ordinary text. How the scan stays fast
is told in :mod:`~memtap.redact.scanner`; texts are scanned once per distinct content
(:mod:`~memtap.redact.caches`), and :func:`redact_json` joins all the new strings of a
structure into one text and scans it once.
"""

from __future__ import annotations

from memtap.protocol.json_encoder import compact_encoder as compact_encoder
from memtap.protocol.json_encoder import encode_json
from memtap.protocol.secret_names import URL_MASK, key_kind, redact_url
from memtap.redact.assignments import is_secret_value
from memtap.redact.caches import CACHE_MAX_CHARS as CACHE_MAX_CHARS
from memtap.redact.caches import CACHE_MIN_CHARS as CACHE_MIN_CHARS
from memtap.redact.caches import CLEAN_SHORT_MAX as CLEAN_SHORT_MAX
from memtap.redact.caches import ENCODE_CACHE_MIN_CHARS as ENCODE_CACHE_MIN_CHARS
from memtap.redact.caches import clear_cache
from memtap.redact.detectors import DETECTORS, Detector
from memtap.redact.detectors import MIN_SECRET_CHARS as MIN_SECRET_CHARS
from memtap.redact.dumps import dumps_redacted, dumps_redacted_record
from memtap.redact.ids import ID_SECRET_PREFIX as ID_SECRET_PREFIX
from memtap.redact.ids import redact_id, redact_optional_id
from memtap.redact.log_filter import RedactingFilter, guard_loggers
from memtap.redact.records import redact_exchange, redact_fact
from memtap.redact.scanner import PIVOT_AHEAD as PIVOT_AHEAD
from memtap.redact.scanner import REDACTED, find_secrets
from memtap.redact.scanner import Handler as Handler
from memtap.redact.streams import redact_stream, redact_stream_events
from memtap.redact.structures import new_text, redact_json
from memtap.redact.text import redact_text
from memtap.redact.validators import looks_random

# Also public, outside __all__ as before: the names imported ``as`` themselves above.
__all__ = [
    "DETECTORS",
    "REDACTED",
    "URL_MASK",
    "Detector",
    "RedactingFilter",
    "clear_cache",
    "dumps_redacted",
    "dumps_redacted_record",
    "encode_json",
    "find_secrets",
    "guard_loggers",
    "is_secret_value",
    "key_kind",
    "looks_random",
    "new_text",
    "redact_exchange",
    "redact_fact",
    "redact_id",
    "redact_json",
    "redact_optional_id",
    "redact_stream",
    "redact_stream_events",
    "redact_text",
    "redact_url",
]
