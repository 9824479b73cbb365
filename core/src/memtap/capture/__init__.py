"""After the call: a finished call's record turned into an exchange (formatted through the
payload hooks, with core's default formatter, redaction and stream accumulator), the
durable spool, the background writer that stores each exchange, and files only their owner
can read."""
