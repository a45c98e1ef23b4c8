"""L3 storage: page keys, the page format, the backend interface and registry, the circuit
breaker, and the background backup / prefetch workers the host tier drives.

Backends (`file://`, `redis://`, `redis+cluster://`) are imported on first use by
`open_backend`, so redis-py loads only in processes that open a Redis URL.
"""

from uniradix.hashing.storage_keys import KeySpace, PageKey
from uniradix.storage.backend import StorageBackend, StorageStats, open_backend, register_backend
from uniradix.storage.breaker import BreakerState, CircuitBreaker
from uniradix.storage.io import (
    BackupResult,
    BackupWriter,
    Prefetcher,
    PrefetchHandle,
    PrefetchPolicy,
    PrefetchTimeout,
)
from uniradix.storage.page_format import Miss, MissReason

__all__ = [
    "BackupResult",
    "BackupWriter",
    "BreakerState",
    "CircuitBreaker",
    "KeySpace",
    "Miss",
    "MissReason",
    "PageKey",
    "PrefetchHandle",
    "PrefetchPolicy",
    "PrefetchTimeout",
    "Prefetcher",
    "StorageBackend",
    "StorageStats",
    "open_backend",
    "register_backend",
]
