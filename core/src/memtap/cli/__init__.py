"""The ``memtap`` command line: the commands (``main``), the demo, and moving data in and
out of a store (``export`` / ``import``, ``import-transcript``)."""
