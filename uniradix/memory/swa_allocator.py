"""SWASlotAllocator: full-attention slots paired with slots of a smaller sliding-window pool.

A model mixing full-attention and sliding-window (SWA) layers keeps every token's full KV but
only a window of SWA KV. Each allocated token gets one slot in each pool; requests, rows and
the tree hold only the *full* slot, and `full_to_swa` maps it to its SWA peer (0 = none: slot
0 of the SWA pool is padding and never handed out)::

    full slot:   ps..2ps-1 | 2ps..3ps-1 | ...          (full pool, capacity C)
    full_to_swa: 7ps..8ps-1| 0 .. 0     | ...          (page 2's SWA peer was freed)
    SWA slot:    its own pages 1..C_swa/ps             (SWA pool, capacity C_swa <= C)

Freeing comes in three kinds, matching `FreeKind`: both sides (`free`), the SWA side only
(`free_swa`: a tombstone or an out-of-window position; the full slot stays allocated) and the
full side of a slot whose SWA side is already gone (`free_full_only`). The mapping is cleared
whenever an SWA peer is freed, so a stale peer can never be freed twice; and every free checks
the whole call before changing anything, so a bad call raises and leaves both pools intact.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from uniradix.memory.allocator import TokenSlotAllocator, to_numpy
from uniradix.types import Slots


class SWASlotAllocator:
    def __init__(
        self, full_tokens: int, swa_tokens: int, page_size: int = 1, device: str = "cpu"
    ) -> None:
        self.full = TokenSlotAllocator(full_tokens, page_size, device)
        self.swa = TokenSlotAllocator(swa_tokens, page_size, device)
        self.page_size = page_size
        self.device = self.full.device
        self.capacity = self.full.capacity
        self.swa_capacity = self.swa.capacity
        # Host-side, like every index the cache keeps; `translate` results go to the device
        # through the caller (see `UnifiedRadixCache.to_device`).
        self.full_to_swa: Slots = np.zeros((self.full.num_pages + 1) * page_size, dtype=np.int64)
        self._page_offsets = np.arange(page_size, dtype=np.int64)

    # ------------------------------------------------------------------ sizes
    def available_size(self) -> int:
        """Tokens `alloc` can serve now: the smaller of the two pools' free slots."""
        return min(self.full.available_size(), self.swa.available_size())

    def full_available_size(self) -> int:
        return self.full.available_size()

    def swa_available_size(self) -> int:
        return self.swa.available_size()

    def used_size(self) -> int:
        """Full slots in use (tree and requests)."""
        return self.full.used_size()

    def swa_used_size(self) -> int:
        return self.swa.used_size()

    # ------------------------------------------------------------------ alloc
    def alloc(self, num_tokens: int) -> torch.Tensor | None:
        """`num_tokens` full slots, each with a fresh SWA peer, or None when either pool is
        short (then nothing is taken from either)."""
        if num_tokens < 0 or num_tokens % self.page_size:
            raise ValueError(
                f"alloc({num_tokens}): need a non-negative multiple of page_size={self.page_size}"
            )
        if num_tokens > self.available_size():
            return None
        full, swa = self.full.alloc(num_tokens), self.swa.alloc(num_tokens)
        assert full is not None and swa is not None
        self.full_to_swa[to_numpy(full)] = to_numpy(swa)
        return full

    def translate(self, full: torch.Tensor | Slots) -> Slots:
        """SWA peers of full slots (0 where the peer was freed)."""
        slots = self._checked(full)
        return self.full_to_swa[slots]

    # ------------------------------------------------------------------ free
    def free(self, full: torch.Tensor | Slots) -> None:
        """Frees full slots and whatever SWA peers they still have."""
        slots = self._checked(full)
        pages, peers = self._peers(slots)
        mapped = peers > 0
        self._check_full_allocated(slots)
        self._release_peers(pages[mapped], peers[mapped])
        self.full.free(slots)

    def free_full_only(self, full: torch.Tensor | Slots) -> None:
        """Frees full slots whose SWA peers were freed already; raises if one still has one
        (freeing it here would leak the peer)."""
        slots = self._checked(full)
        _, peers = self._peers(slots)
        if np.count_nonzero(peers):
            raise ValueError(
                f"free_full_only: slots {slots[:8].tolist()} still have SWA peers "
                f"{peers[peers > 0][:8].tolist()}; free them with free()"
            )
        self.full.free(slots)

    def free_swa(self, full: torch.Tensor | Slots) -> None:
        """Frees only the SWA peers of full slots (the full slots stay allocated); raises if a
        peer is already gone, which would be a double free."""
        slots = self._checked(full)
        pages, peers = self._peers(slots)
        if np.count_nonzero(peers) != peers.size:
            raise ValueError(
                f"free_swa: some of full slots {slots[:8].tolist()} have no SWA peer (freed twice?)"
            )
        self._check_full_allocated(slots)
        self._release_peers(pages, peers)

    def move_swa(self, kept_and_incoming: torch.Tensor | Slots) -> None:
        """Row 0 (`kept`) are full slots without SWA peers, row 1 (`incoming`) full slots with
        them, both whole pages in the same order: each kept slot takes over the SWA peer of
        the incoming slot at the same position, and the incoming full slots are freed.

        Used when the tree recovers SWA KV for a node whose (locked) full slots must stay."""
        both = (
            kept_and_incoming.detach().cpu().numpy()
            if isinstance(kept_and_incoming, torch.Tensor)
            else kept_and_incoming
        )
        if both.ndim != 2 or both.shape[0] != 2:
            raise ValueError(f"move_swa needs a 2 x n array, got {tuple(both.shape)}")
        kept, incoming = self._checked(both[0]), self._checked(both[1])
        peers = self.full_to_swa[incoming]
        if np.count_nonzero(self.full_to_swa[kept]) or np.count_nonzero(peers) != peers.size:
            raise ValueError(
                f"move_swa: kept slots {kept[:8].tolist()} must have no SWA peers and incoming "
                f"slots {incoming[:8].tolist()} must all have one"
            )
        self._check_full_allocated(incoming)
        self._check_full_allocated(kept)
        self.full_to_swa[kept] = peers
        self.full_to_swa[self._page_slots(self._pages(incoming))] = 0
        self.full.free(incoming)

    # ------------------------------------------------------------------ state
    def is_allocated(self, full: torch.Tensor | Slots) -> npt.NDArray[np.bool_]:
        """Per full slot: is it handed out."""
        return self.full.is_allocated(full)

    def reset(self) -> None:
        self.full.reset()
        self.swa.reset()
        self.full_to_swa[:] = 0

    # ------------------------------------------------------------------ internals
    def _checked(self, full: torch.Tensor | Slots) -> Slots:
        slots = to_numpy(full)
        if slots.size and (slots.min() < 0 or slots.max() >= self.full_to_swa.size):
            raise ValueError(
                f"full slots outside [0, {self.full_to_swa.size}): {slots[:8].tolist()}"
            )
        return slots

    def _check_full_allocated(self, full: Slots) -> None:
        if not self.full.is_allocated(full).all():
            raise ValueError(f"full slots {full[:8].tolist()} are not all allocated")
        if self.page_size == 1 and np.unique(full).size != full.size:
            raise ValueError(f"duplicate full slots in one call: {full[:8].tolist()}")

    def _pages(self, full: Slots) -> Slots:
        return np.unique(full // self.page_size)

    def _page_slots(self, pages: Slots) -> Slots:
        return (pages[:, None] * self.page_size + self._page_offsets).reshape(-1)

    def _peers(self, full: Slots) -> tuple[Slots, Slots]:
        """Distinct pages of `full` and the first SWA slot of each page's peer (0 = none)."""
        pages = self._pages(full)
        return pages, self.full_to_swa[pages * self.page_size]

    def _release_peers(self, pages: Slots, peers: Slots) -> None:
        self.swa.free(peers)
        self.full_to_swa[self._page_slots(pages)] = 0
