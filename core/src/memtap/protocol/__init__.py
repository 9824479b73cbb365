"""The contracts: the data model, the wire contracts between core and provider plugins,
agent profiles (anchors), the embedder port and the markers of memtap's hooks; and what
storage and the spool share with redaction without depending on it: the compact JSON encoder
and the names secrets go by. Leaves: they import nothing else of memtap."""
