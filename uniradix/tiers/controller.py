"""HostTier: the controller of the L2 host tier (the reference's `HybridCacheController`).

The tree and its components decide; this controller executes: it allocates and frees host
slots, builds one `CopyOp` batch per node chain, submits it to a `TransferEngine` and commits
on the ack. Acks are drained at points the scheduler chooses (`writing_check`,
`loading_check`); until then the node chain of a write is device-locked (its device slots
are being read) and marked `metadata["write"] = ticket`, the chain of a load is
device-locked (its device slots are being written) and marked `metadata["load"] = ticket`.
A split copies the mark to both fragments, so an ack clears the whole chain.

Write policies (`uniradix.tiers.write_policy`): an insert backs up its node and every
ancestor without a host copy, root-first, in one batch (write-through); write-back backs up
a device-leaf victim at eviction and waits for it, so the victim is demoted, not lost, and
drops the host copy of what a load-back brought to the device (one copy per node). A
host pool too full for a write evicts host leaves first; if still short the write is
skipped (write-through: the node stays device-only; write-back: its eviction is a real loss,
counted in `stats.lost_tokens`).

What a write backs up and its batch live in `uniradix.tiers.backups`; load-back in
`uniradix.tiers.load_back`.
"""

from __future__ import annotations

from typing import Protocol

from uniradix.components.aux_host import AuxHostComponent
from uniradix.components.full_host import HostFullComponent
from uniradix.event_sink import MEDIUM_CPU_PINNED
from uniradix.key import RadixKey
from uniradix.memory.allocator import to_numpy
from uniradix.memory.host_kv import HostKVPool
from uniradix.memory.host_pools import HostPools
from uniradix.tiers import aux_tier, backups
from uniradix.tiers import load_back as loads
from uniradix.tiers.host_aux import HostAux
from uniradix.tiers.host_checks import check_host_tier, host_usage
from uniradix.tiers.host_insert import insert_host
from uniradix.tiers.null import NoHostTier
from uniradix.tiers.stats import HostTierStats
from uniradix.tiers.tickets import Tickets
from uniradix.tiers.transfer import AuxCopy, TransferEngine
from uniradix.tiers.views import CacheView
from uniradix.tiers.write_policy import WritePolicy
from uniradix.tree.node import TreeNode
from uniradix.types import ComponentType, FreeSlots, IncLockRefResult, MatchResult, Req, Slots


class CacheWithHostTier(CacheView, Protocol):
    """The controller as a host tier attaches to it: `host_tier` is where it hangs itself."""

    host_tier: NoHostTier


class HostTier(NoHostTier):
    enabled = True

    def __init__(
        self,
        cache: CacheWithHostTier,
        host_pools: HostPools,
        engine: TransferEngine,
        write_policy: WritePolicy | str = WritePolicy.WRITE_THROUGH,
        selective_hits: int = 2,
        load_back_threshold: int = 1,
    ) -> None:
        full = cache.component(ComponentType.FULL)
        if not isinstance(full, HostFullComponent):
            raise TypeError(f"a host tier needs a HostFullComponent, got {type(full).__name__}")
        aux: list[AuxHostComponent] = []
        for c in cache.components[1:]:
            if not isinstance(c, AuxHostComponent) or c.name not in host_pools.aux:
                raise ValueError(
                    f"the host tier needs a host half and a host pool for component {c.name!r} "
                    f"(host pools: {host_pools.names()})"
                )
            aux.append(c)
        if selective_hits < 1 or load_back_threshold < 1:
            raise ValueError(
                f"selective_hits={selective_hits} and load_back_threshold={load_back_threshold} "
                "must be >= 1"
            )
        if host_pools.full.page_size != cache.page_size:
            raise ValueError(
                f"host page_size={host_pools.full.page_size} != cache page_size={cache.page_size}"
            )
        self.cache = cache
        self.full = full
        self.host_pools = host_pools
        self.engine = engine
        self.policy = WritePolicy.parse(write_policy)
        self.threshold = self.policy.backup_threshold(selective_hits)
        self.load_back_threshold = load_back_threshold
        self.aux = aux  # HostSWAComponent / HostMambaComponent, in cache order
        self.aux_by_name = {c.name: c for c in aux}  # as `evict_host_aux` callers name them
        self.aux_indices = tuple(c.index for c in aux)
        self.stats = HostTierStats()
        for c in aux:
            for counts in (self.stats.aux_written, self.stats.aux_loaded):
                counts[c.name] = 0
            self.stats.aux_write_skipped[c.name] = self.stats.aux_host_evicted[c.name] = 0
        self.writes: dict[int, tuple[TreeNode, IncLockRefResult]] = {}
        self.loads: dict[int, tuple[TreeNode, IncLockRefResult]] = {}
        # write tickets -> the revived windows and states they back up (`backup_plan`)
        self.revived_copies: dict[int, list[AuxCopy]] = {}
        self.aux_locks: dict[int, list[tuple[TreeNode, IncLockRefResult]]] = {}  # by write
        self.tickets = Tickets()
        self.host_kv: HostKVPool | None = None  # the host KV bytes, when the model has layers
        cache.host_tier = self
        cache.tree.host_only_nodes = True

    # ------------------------------------------------------------------ writes
    def after_insert(self, node: TreeNode) -> None:
        """Write-through: backs up the inserted node's chain once it is hot enough, with
        the windows and states that came back to the device above it (`tiers.backups`)."""
        if self.threshold is None or node.parent is None:
            return
        anchor = backups.hot_anchor(node, self.threshold)
        if anchor is None:
            return
        chain, revived = backups.backup_plan(self, anchor)
        if chain or revived:
            backups.submit_backup(self, chain, anchor, lock=True, revived=revived)

    def alloc_host(self, num_tokens: int) -> Slots | None:
        """`num_tokens` host slots, evicting host leaves when short; None if still short."""
        pool = self.host_pools.full
        short = num_tokens - pool.available_size()
        if short > 0:
            self.evict_host(short)
        slots = pool.alloc(num_tokens)
        if slots is None:
            return None
        self.host_pools.note_usage()
        return to_numpy(slots)

    def writing_check(self) -> None:
        """Commits every acked write: clears the chain's marks and releases its lock."""
        self.tickets.poll(self.engine)
        for ticket in [t for t in self.writes if self.tickets.acked(t)]:
            anchor, receipt = self.writes.pop(ticket)
            failed = self.tickets.settle(ticket)
            chain = self.full.clear_marks(anchor, "write", ticket)
            revived = self.revived_copies.pop(ticket, [])
            if failed:
                aux_tier.drop_failed_copies(self, revived)
                backups.drop_failed_backup(self, chain)  # never reported stored: nothing to remove
            elif chain:
                self._report(chain[::-1], MEDIUM_CPU_PINNED, stored=True)
                if self.storage is not None:
                    self.storage.backup(chain)
            self.cache.dec_lock_ref(anchor, receipt)
            for node, lock in self.aux_locks.pop(ticket, ()):
                self.cache.dec_lock_ref(node, lock)

    def _report(self, nodes: list[TreeNode], medium: str, stored: bool) -> None:
        """Tells the cache's event sink, if any, what just committed (in `nodes` order)."""
        sink = self.cache.event_sink
        if sink is None:
            return
        for n in nodes:
            if stored:
                sink.on_stored(n, medium)
            else:
                sink.on_removed(n, medium)

    # ------------------------------------------------------------------ device eviction
    def evict_leaf(self, node: TreeNode, actions: list[FreeSlots], tracker: list[int]) -> int:
        """Device eviction of the unlocked device leaf `node`: demotes it when it has (or,
        under write-back, can get) a host copy and returns its units; otherwise drops its
        host-only descendants and returns 0, and the caller deletes it."""
        d = node.data[0]
        if self.policy is WritePolicy.WRITE_BACK:
            if d.host_value is None:
                self.write_now(node)
            else:  # a window or state that came back since the backup gets its copy too
                aux_tier.backup_internal(self, node)
        if d.host_value is not None:
            aux_tier.demote_aux(self, node, actions, tracker)
            num = self.full.demote(node, actions)
            self.stats.demoted_tokens += num
            return num
        self.stats.lost_tokens += node.num_tokens
        for child in list(node.children.values()):
            self._drop_host_subtree(child)
        return 0

    def write_now(self, node: TreeNode) -> None:
        """Write-back of `node` alone, waited for: its device slots are freed right after."""
        ticket = backups.submit_backup(self, [node], node, lock=False)
        if ticket is None:
            return
        self.tickets.wait(self.engine, ticket)
        failed = self.tickets.settle(ticket)
        self.full.clear_marks(node, "write", ticket)
        if failed:
            backups.drop_failed_backup(self, [node])
        else:
            self._report([node], MEDIUM_CPU_PINNED, stored=True)
            if self.storage is not None:  # the victim goes on to L3 too
                self.storage.backup([node])

    def before_internal_eviction(self, node: TreeNode) -> None:
        """Write-back: an internal node about to lose its device SWA window or Mamba state
        (a tombstone) gets its host copies first (the reference's `InternalStateBackup`),
        so the state is demoted, not lost."""
        if self.policy is WritePolicy.WRITE_BACK:
            aux_tier.backup_internal(self, node)

    def _drop_host_subtree(self, node: TreeNode) -> None:
        """Frees a host-only subtree bottom-up (its device parent is being deleted)."""
        for child in list(node.children.values()):
            self._drop_host_subtree(child)
        self._evict_host_leaf(node)

    # ------------------------------------------------------------------ host eviction
    def inc_host_lock_ref(self, node: TreeNode) -> None:
        """Pins the host-only segment ending at `node` against host eviction (e.g. while a
        caller prepares its load-back); undo with `dec_host_lock_ref(node)`."""
        self._check_node(node)
        self.full.inc_host_lock_ref(node)

    def dec_host_lock_ref(self, node: TreeNode) -> None:
        self._check_node(node)
        self.full.dec_host_lock_ref(node)

    def _check_node(self, node: TreeNode) -> None:
        if not isinstance(node, TreeNode) or not self.cache.tree.in_tree(node):
            raise ValueError(f"{node!r} is not a node of this cache's tree")

    def evict_host(self, num_tokens: int) -> int:
        """Frees at least `num_tokens` host slots where host leaves allow: host-only leaves
        in eviction-policy order; a parent left childless and host-only follows. Returns
        the units freed."""
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(
                f"evict_host: num_tokens must be a non-negative int, got {num_tokens!r}"
            )
        freed = 0
        while freed < num_tokens:
            node = self.full.host_leaves.pop()
            if node is None:
                break
            freed += self._evict_host_leaf(node)
        return freed

    def drop_device_copies_host(self, num_tokens: int) -> int:
        """Frees `num_tokens` host slots where host leaves could not: drops host copies of
        device-resident nodes with no copy below them (a copy needs its parent's), LRU first,
        none with a transfer in flight; only a later demotion is given up. Returns units freed."""
        freed = 0
        while freed < num_tokens:
            candidates = [
                n
                for n in self.cache.tree.nodes()
                if n.data[0].value is not None
                and n.data[0].host_value is not None
                and n.data[0].metadata is None
                and all(c.data[0].host_value is None for c in n.children.values())
            ]
            if not candidates:
                break
            for node in sorted(candidates, key=lambda n: n.last_access_time):
                self._report([node], MEDIUM_CPU_PINNED, stored=False)
                aux_tier.drop_aux_host(self, node)
                self.host_pools.full.free(self.full.drop_host_copy(node), node_value=True)
                freed += node.num_tokens
                if freed >= num_tokens:
                    break
        return freed

    def evict_host_aux(self, name: str, num: int) -> int:
        """Frees at least `num` host units of the auxiliary component `name` ("swa" slots,
        "mamba" states) where its host-only data allows; returns the units freed."""
        if not isinstance(num, int) or num < 0:
            raise ValueError(f"evict_host_aux: num must be a non-negative int, got {num!r}")
        component = self.aux_by_name.get(name)
        if component is None:
            raise ValueError(f"evict_host_aux: no auxiliary host pool {name!r}")
        return aux_tier.evict_aux_host(self, component, num)

    def _evict_host_leaf(self, node: TreeNode) -> int:
        self._report([node], MEDIUM_CPU_PINNED, stored=False)
        aux_tier.drop_aux_host(self, node)
        slots = self.full.evict_host_node(node)
        self.host_pools.full.free(slots, node_value=True)
        parent = self.cache.tree.remove_leaf(node)
        self.full.update_host_leaf(parent)
        self.stats.host_evicted_tokens += node.num_tokens
        return node.num_tokens

    # ------------------------------------------------------------------ arrivals
    def insert_host(
        self, key: RadixKey, host_slots: Slots, start: int, aux: HostAux | None = None
    ) -> int:
        """Inserts pages that arrived in `host_slots` (allocated with `alloc_host`, holding
        the KV of the key's tokens from `start`) as host copies: host-only nodes past the
        tree's match, host copies of matched device nodes that lack one; spare slots are
        freed. Returns the tokens that gained a host copy (`uniradix.tiers.host_insert`)."""
        return insert_host(self, key, host_slots, start, aux)

    # ------------------------------------------------------------------ load-back
    def load_back(
        self, match: MatchResult, mem_quota: int | None = None, req: Req | None = None
    ) -> MatchResult:
        return loads.load_back(self, match, mem_quota, req)

    def init_load_back(
        self, node: TreeNode, mem_quota: int | None = None, req: Req | None = None
    ) -> loads.LoadBackResult:
        return loads.init_load_back(self, node, mem_quota, req)

    def loading_check(self) -> None:
        """Commits every acked load: clears the chain's marks and releases its lock."""
        self.tickets.poll(self.engine)
        for ticket in [t for t in self.loads if self.tickets.acked(t)]:
            if self.tickets.failed(ticket):
                # The loaded slots hold garbage and a request may already hold them; turning
                # that into a recompute needs the scheduler's help: not done yet, fail loudly.
                raise RuntimeError(f"host tier: load-back batch {ticket} failed")
            anchor, receipt = self.loads.pop(ticket)
            self.tickets.settle(ticket)
            loaded = self.full.clear_marks(anchor, "load", ticket)
            self.cache.dec_lock_ref(anchor, receipt)
            if self.policy is WritePolicy.WRITE_BACK:
                self._report(loaded, MEDIUM_CPU_PINNED, stored=False)
                # Exclusive tiers: the device copy is backed up again if it is evicted, so
                # the host room goes to data that is nowhere else.
                for node in loaded:
                    aux_tier.drop_aux_host(self, node)
                    self.host_pools.full.free(self.full.drop_host_copy(node), node_value=True)

    def wait_loads(self) -> None:
        """Blocks until every submitted load-back has landed, and commits them."""
        for ticket in list(self.loads):
            self.engine.wait(ticket)
        self.loading_check()

    def drain(self) -> None:
        """Blocks until every write and load finished, and commits them all."""
        for ticket in [*self.writes, *self.loads]:
            self.engine.wait(ticket)
        self.writing_check()
        self.loading_check()

    # ------------------------------------------------------------------ state
    def host_usage(self) -> dict[str, int]:
        """Host full slots by state: free, evictable (host-only, unpinned, or a backed
        node's copy), protected (pinned) and in flight (a pending write)."""
        return host_usage(self)

    def reset(self) -> None:
        """Forgets every transfer (the cache's reset emptied the tree) and the host pools."""
        self.drain_engine()
        if self.storage is not None:
            self.storage.reset()
        self.writes.clear()
        self.loads.clear()
        self.revived_copies.clear()
        self.aux_locks.clear()
        self.tickets.clear()
        self.host_pools.reset()

    def drain_engine(self) -> None:
        for ticket in [*self.writes, *self.loads]:
            self.engine.wait(ticket)
        self.engine.poll()

    def close(self) -> None:
        self.engine.close()
        if self.storage is not None:
            self.storage.close()

    def check_invariants(self, errors: list[str]) -> None:
        check_host_tier(self, errors)
