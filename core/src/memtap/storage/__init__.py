"""Storage: the contract every backend implements with the built-in in-memory backend,
the ``memory://`` default plugin, what the SQL backends share, and the change feed between processes."""
