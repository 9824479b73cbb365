"""The contracts: the data model, the wire contracts between core and provider plugins,
agent profiles (anchors), the embedder port and the markers of memtap's hooks. Leaves: they
import nothing else of memtap."""
