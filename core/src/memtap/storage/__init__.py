"""Storage: the contract every backend implements with the built-in in-memory backend,
what the SQL backends share, and the change feed between processes."""
