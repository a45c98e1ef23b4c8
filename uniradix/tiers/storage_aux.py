"""L3 for the auxiliary components of a hybrid cache: the per-pool hit policies.

Full KV is stored page by page (`uniradix.tiers.storage_tier`); the auxiliary components
store only what a request needs to *resume* at a node's end:

- **SWA** (`pool="swa"`): the trailing window pages of each backed-up node's host copy
  (the last `ceil(window / page_size)` pages, fewer when the node is shorter), each keyed by
  its page digest;
- **Mamba** (`pool="mamba"`): the node's single host state, keyed by the digest of the
  node's last page (the state after that page).

Each pool has its own `KeySpace` (its dtype and shape bound in), so the three never read
each other's bytes. **A prefix is an L3 hit only where every component can resume**:
`plan(keys, lo, hi)` walks the page boundaries of the stored full prefix `(lo, hi]` from
the deepest down and returns the first `b` where a Mamba state is stored after page `b - 1`
and the SWA window's pages before `b` (`[b - window_pages, b)`, the part below `lo` too) are
all stored. Only the full pages up to `b`, the window's pages from `lo` on and that one state
are fetched. The window's pages below `lo` belong to the tree's match: when the tree no
longer holds them the later match stops short (a lost hit, never wrong KV).

A simulation cache (no layers) stores empty payloads; with layers, the SWA pages' bytes are
the host SWA pool's (`HostKVPool.page_bytes`) and a state's are `HostMambaStates.state_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from uniradix.hashing.storage_keys import KeySpace, PageKey
from uniradix.memory.host_kv import HostKVPool, HostMambaStates
from uniradix.storage.backend import StorageBackend
from uniradix.storage.page_format import Payload
from uniradix.tiers.aux_tier import alloc_aux_host
from uniradix.tiers.host_aux import HostAux
from uniradix.tiers.views import HostTierView
from uniradix.tree.node import TreeNode

_EMPTY = b""


@dataclass
class AuxPlan:
    """What a prefetch fetches besides the full pages `[lo, boundary)`."""

    boundary: int  # in pages: the deepest resumable page boundary
    swa_keys: list[PageKey] = field(default_factory=list)  # window pages from lo to boundary
    mamba_key: PageKey | None = None  # the state at the boundary

    @property
    def keys(self) -> list[PageKey]:
        return self.swa_keys + ([self.mamba_key] if self.mamba_key is not None else [])


@dataclass
class AuxJob:
    """One auxiliary pool's part of a chain's backup: its keys and payloads, and the nodes
    they belong to in key order (each node's trailing window pages, or its state: 1), so
    the stored ones can be announced (`storage_tier`, as KV-cache groups on `DISK`)."""

    component: Any  # the SWA or Mamba component (its `name`, `index`)
    keys: list[PageKey]
    payloads: list[Payload]
    owners: list[tuple[TreeNode, int]]


class AuxStorage:
    def __init__(
        self,
        tier: HostTierView,
        backend: StorageBackend,
        model_fingerprint: str,
        host_swa: HostKVPool | None,
        host_states: HostMambaStates | None,
    ) -> None:
        self.tier = tier
        self.backend = backend
        self.page_size = ps = tier.cache.page_size
        by_name: dict[str, Any] = {c.name: c for c in tier.aux}
        self.swa: Any = by_name.get("swa")
        self.mamba: Any = by_name.get("mamba")
        self.host_swa = host_swa if host_swa is not None and host_swa.num_layers else None
        self.host_states = (
            host_states if host_states is not None and host_states.num_layers else None
        )
        self.window_pages = 0 if self.swa is None else -(-int(self.swa.window) // ps)
        if self.host_swa is None:
            self.swa_keyspace = KeySpace(model_fingerprint, "none", "sim", ps, "swa")
        else:
            kv = self.host_swa
            shape = f"kv{kv.num_layers}x{kv.num_kv_heads}x{kv.head_dim}"
            dtype = str(kv.dtype).removeprefix("torch.")
            self.swa_keyspace = KeySpace(model_fingerprint, dtype, shape, ps, "swa")
        if self.host_states is None:
            self.mamba_keyspace = KeySpace(model_fingerprint, "none", "sim", ps, "mamba")
        else:
            st = self.host_states
            shape = f"m{st.num_layers}:{list(st.conv_states.shape[2:])}:"
            shape += f"{list(st.temporal_states.shape[2:])}"
            dtype = str(st.conv_states.dtype).removeprefix("torch.")
            self.mamba_keyspace = KeySpace(model_fingerprint, dtype, shape, ps, "mamba")

    @property
    def active(self) -> bool:
        return self.swa is not None or self.mamba is not None

    # ------------------------------------------------------------------ backup
    def backup_jobs(self, chain: list[TreeNode], keys: list[PageKey]) -> list[AuxJob]:
        """The pages to write for `chain` (root-first; `keys` are its path's full-pool page
        keys from the root): per pool, its keys, payloads and owners."""
        ps, tree = self.page_size, self.tier.cache.tree
        swa_keys: list[PageKey] = []
        swa_pages: list[int] = []  # host SWA pages, for the payloads
        swa_owners: list[tuple[TreeNode, int]] = []
        mamba_keys: list[PageKey] = []
        mamba_slots: list[int] = []
        mamba_owners: list[tuple[TreeNode, int]] = []
        for node in chain:
            end = tree.prefix_len(node)  # to the node's end
            start = end - node.num_tokens
            if start % ps or end % ps:
                continue
            first, last = start // ps, end // ps
            if self.mamba is not None:
                state = node.data[self.mamba.index].host_value
                if state is not None:
                    mamba_keys += self.mamba_keyspace.same_pages(keys[last - 1 : last])
                    mamba_slots.append(int(state[0]))
                    mamba_owners.append((node, 1))
            if self.swa is not None:
                window = node.data[self.swa.index].host_value
                if window is not None:
                    lo = max(first, last - self.window_pages)
                    swa_keys += self.swa_keyspace.same_pages(keys[lo:last])
                    rows = np.asarray(window)[(lo - first) * ps :: ps]
                    swa_pages.extend(int(s) // ps for s in rows)
                    swa_owners.append((node, last - lo))
        jobs: list[AuxJob] = []
        if swa_keys:
            jobs.append(AuxJob(self.swa, swa_keys, self._swa_payloads(swa_pages), swa_owners))
        if mamba_keys:
            payloads = self._state_payloads(mamba_slots)
            jobs.append(AuxJob(self.mamba, mamba_keys, payloads, mamba_owners))
        return jobs

    def _swa_payloads(self, pages: list[int]) -> list[Payload]:
        if self.host_swa is None:
            return [_EMPTY] * len(pages)
        data = self.host_swa.page_bytes(np.asarray(pages, dtype=np.int64)).numpy()
        return [memoryview(data[i]) for i in range(len(pages))]

    def _state_payloads(self, slots: list[int]) -> list[Payload]:
        if self.host_states is None:
            return [_EMPTY] * len(slots)
        return [self.host_states.state_bytes(s).numpy().data for s in slots]

    # ------------------------------------------------------------------ prefetch
    def plan(self, keys: list[PageKey], lo: int, hi: int) -> AuxPlan | None:
        """The deepest page boundary in `(lo, hi]` where every auxiliary component can
        resume from L3 (`keys`: the full keys of the request's pages from the root)."""
        for b in range(hi, lo, -1):
            mamba_key = None
            if self.mamba is not None:
                mamba_key = self.mamba_keyspace.same_pages(keys[b - 1 : b])[0]
                if self.backend.batch_exists([mamba_key]) != 1:
                    continue
            swa_keys: list[PageKey] = []
            if self.swa is not None:
                first = max(0, b - self.window_pages)
                window = self.swa_keyspace.same_pages(keys[first:b])
                if self.backend.batch_exists(window) != len(window):
                    continue
                swa_keys = window[max(lo, first) - first :]
            return AuxPlan(b, swa_keys, mamba_key)
        return None

    def payload_sizes(self, plan: AuxPlan) -> list[int]:
        """The byte length each of `plan.keys` must arrive with."""
        swa = 0 if self.host_swa is None else self.host_swa.page_nbytes()
        state = 0 if self.host_states is None else self.host_states.state_nbytes()
        return [swa] * len(plan.swa_keys) + ([state] if plan.mamba_key is not None else [])

    def to_host(self, plan: AuxPlan, pages: list[memoryview]) -> HostAux | None:
        """Host slots holding the arrived aux pages of `plan` (None: no host room; nothing
        kept)."""
        ps = self.page_size
        aux = HostAux()
        if plan.swa_keys:
            slots = alloc_aux_host(self.tier, self.swa, len(plan.swa_keys) * ps)
            if slots is None:
                return None
            aux.swa = slots
            if self.host_swa is not None:
                data = torch.frombuffer(
                    bytearray(b"".join(pages[: len(plan.swa_keys)])), dtype=torch.uint8
                )
                self.host_swa.set_page_bytes(slots[::ps] // ps, data.view(len(plan.swa_keys), -1))
        if plan.mamba_key is not None:
            state = alloc_aux_host(self.tier, self.mamba, 1)
            if state is None:
                if aux.swa is not None:
                    self.tier.host_pools.aux["swa"].free(aux.swa, node_value=True)
                return None
            aux.mamba = state
            if self.host_states is not None:
                data = torch.frombuffer(bytearray(pages[-1]), dtype=torch.uint8)
                self.host_states.set_state_bytes(int(state[0]), data)
        return aux
