"""`null://`: the absent L3 as a null object. It stores nothing and every read is a plain
miss, so a cache without storage runs the same code paths as one with it (no `if storage:`
guards in the host tier)."""

from __future__ import annotations

from uniradix.storage.backend import StorageBackend, StoredPage, register_backend
from uniradix.storage.page_format import Payload


class NullBackend(StorageBackend):
    def _store_exists_prefix(self, names: list[str]) -> int:
        return 0

    def _store_get(self, names: list[str]) -> list[StoredPage | None]:
        return [None] * len(names)

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        return 0

    def _store_delete(self, names: list[str]) -> int:
        return 0

    def _store_clear(self) -> None:
        return None

    def _store_close(self) -> None:
        return None


register_backend("null", lambda url: NullBackend())
