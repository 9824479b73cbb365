"""After the call: the durable spool, the background writer that formats and stores each
exchange, and files only their owner can read."""
