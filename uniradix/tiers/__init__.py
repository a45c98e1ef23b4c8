"""The host tier (L2): moving pool bytes between device and host, and its bookkeeping."""
