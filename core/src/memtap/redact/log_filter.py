"""The logging filter that removes secrets from memtap's log records."""

from __future__ import annotations

import logging

from memtap.redact.text import redact_text


class RedactingFilter(logging.Filter):
    """A logging filter removing secrets from a record's message and traceback (the record
    is changed in place, so every handler sees the redacted text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record``; always lets it through."""
        try:
            message = record.getMessage()
        except Exception:
            return True
        redacted = redact_text(message)
        if redacted is not message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact_text(text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_FILTER = RedactingFilter()


def guard_loggers(prefix: str = "memtap") -> None:
    """Attach the redacting filter to every logger named ``prefix`` or ``prefix.*`` that
    exists now (once each). A filter runs where a record is made, so every handler,
    wherever it is attached, sees the redacted record."""
    names = [n for n in list(logging.root.manager.loggerDict) if n == prefix or n.startswith(prefix + ".")]
    for name in [prefix, *names]:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
