"""``python -m memtap.cli``: the ``memtap`` command without its console script."""

from memtap.cli.main import main

main()
