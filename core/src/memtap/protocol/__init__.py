"""The contracts: the data model, the wire contracts between core and provider plugins,
agent profiles (anchors) and the embedder port. Leaves: they import nothing else of memtap."""
