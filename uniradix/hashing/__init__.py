"""Every hash of the library in one place: page digests (the chain that names a token
prefix), the per-tree digest table, the KV-event block hashes and the L3 storage keys."""
