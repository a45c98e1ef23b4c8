"""Parameters, results, actions and the request record the cache reads and writes."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from uniradix.key import GrowingKey, RadixKey, Tokens
from uniradix.slots import Slots as Slots  # re-exported: the name every module imports

if TYPE_CHECKING:
    from uniradix.tree.node import TreeNode


class ComponentType(enum.IntEnum):
    FULL = 0
    SWA = 1
    MAMBA = 2


ComponentKey = ComponentType | str
"""What names a component of a cache: a built-in `ComponentType`, or the name a component
class from outside the package declares as its `component_type` and registers under
(`uniradix.components.registry`)."""


class FreeKind(enum.Enum):
    """Which pool memory a `FreeSlots` action gives back."""

    KV = "kv"  # full KV slots, and their SWA peers when the model has SWA layers
    KV_FULL_ONLY = "kv_full_only"  # full KV slots whose SWA peers were already freed
    SWA = "swa"  # only the SWA peers of these full KV slots (tombstoning)
    # a 2 x n tensor (kept, incoming) of full slots: the kept slots take over the incoming
    # slots' SWA peers and the incoming full slots are freed (SWA recovery under a lock)
    SWA_MOVE = "swa_move"
    MAMBA = "mamba"  # Mamba state slots

    # Members are singletons compared by identity: hash them so too (Enum's own __hash__ is
    # Python code, and the cache looks up each free's pool by its kind).
    __hash__ = object.__hash__


class FreeSlots(NamedTuple):
    """An instruction from the tree to the cache: give these slots back to their pool.

    `node_value` marks the slots of one tree node's value: distinct whole pages by
    construction (checked by `check_invariants`), so the allocator skips re-deriving that
    (a sort of the whole array) and only checks that every page is still allocated. (A
    NamedTuple, as `MatchResult`: one is built for every free of an insert or eviction.)"""

    kind: FreeKind | str  # a str: the extra pool of that name (`CachePools.extra`)
    indices: Slots
    node_value: bool = False


# The default orders of Mamba states and SWA windows (`uniradix.eviction.orders`): states and
# windows with no sign of reuse first, then GreedyDual credits weighted by reuse. The only
# other order of each pool is "lru"; why this one is the default: docs/hit_rates.md.
DEFAULT_AUX_EVICTION_POLICY = "reuse_credit"
DEFAULT_SWA_EVICTION_POLICY = "reuse_credit"


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """What components need to know about the model and the cache, shared by all of them.

    Mamba: states are checkpointed only at multiples of the checkpoint grid
    `lcm(mamba_cache_chunk_size, page_size)` (the SSM kernel materializes states per chunk);
    `mamba_max_states_per_path` caps the states kept along one root-to-node path (None: no
    cap). `aux_eviction_policy` orders the eviction of Mamba states and `swa_eviction_policy`
    that of SWA windows: "reuse_credit" (the default) or "lru" (`uniradix.eviction.orders`).
    """

    page_size: int = 1
    is_eagle: bool = False
    eviction_policy: str = "lru"
    sliding_window: int | None = None
    mamba_cache_chunk_size: int = 1
    mamba_max_states_per_path: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Sessions (`uniradix.sessions`): keep finished turns' context covered between turns;
    # remember this many released session ids (a late turn of one does not re-cover it).
    enable_session_cache: bool = False
    session_closed_memory: int = 8192
    aux_eviction_policy: str = DEFAULT_AUX_EVICTION_POLICY
    swa_eviction_policy: str = DEFAULT_SWA_EVICTION_POLICY


@dataclass(frozen=True, slots=True)
class MatchPrefixParams:
    key: RadixKey
    req: Req | None = None


class MatchResult(NamedTuple):
    """What a prefix lookup found.

    `device_indices` are the full-KV slots of the first `device_prefix_len` units; they stay
    valid only while `last_device_node` is locked (`inc_lock_ref`) or until the next call that
    may evict. `full_kv_hit_length` counts every full-KV unit the walk matched, even past the
    point where another component (SWA window, Mamba state) stopped the usable match.
    `mamba_branching_seqlen`, when set, is where the engine should checkpoint a Mamba state so
    the next request sharing this prefix can resume from it. With a host tier,
    `host_hit_length` units past the device prefix are on the host only, ending at
    `last_host_node` (usable after a load-back); `best_match_node` is the deepest usable node
    on any tier (both are `last_device_node` when the host adds nothing, None without a host
    tier). `swa_host_hit_length` / `mamba_host_hit_length` say what of the auxiliary state
    at that boundary a load-back must bring from the host. (A typed NamedTuple rather
    than a dataclass: it is built on every lookup, and this is 3x cheaper to construct.)
    """

    device_indices: torch.Tensor
    device_prefix_len: int
    last_device_node: TreeNode
    full_kv_hit_length: int
    mamba_branching_seqlen: int | None = None
    host_hit_length: int = 0
    last_host_node: TreeNode | None = None
    best_match_node: TreeNode | None = None
    swa_host_hit_length: int = 0  # window tokens at the host boundary whose SWA is host-only
    mamba_host_hit_length: int = 0  # 1 when the state at the host boundary is host-only


@dataclass(frozen=True, slots=True)
class InsertParams:
    """Insert `key` whose full-KV slots are `value` (same length).

    The caller still owns `value[:prev_prefix_len]`, which already are the tree's own slots
    (from an earlier match or insert): they are never freed as duplicates. Other slots of
    `value` that the tree already holds under the same key are duplicates and are freed.
    """

    key: RadixKey
    value: torch.Tensor | None = None
    prev_prefix_len: int = 0
    inserted_len: int = 0
    priority: int = 0
    mamba_value: torch.Tensor | None = None
    swa_evicted_seqlen: int = 0
    # the inserting request's `Req.checkpoint_seqlens`: the SWA order learns how often the
    # windows it leaves past its last checkpoint (its decode outputs) are reused
    checkpoint_seqlens: tuple[int, ...] = ()
    # values of components registered from outside, by component name (their own pools)
    extra_values: Mapping[str, torch.Tensor] | None = None


class InsertResult(NamedTuple):
    """What an insert did: `prefix_len` units of the key were cached already, the key ends
    at `last_device_node`, and `mamba_exist` says the tree held a Mamba state there already
    (the caller keeps, and must free, the slot it passed). (A NamedTuple, as `MatchResult`:
    built on every insert.)"""

    prefix_len: int
    last_device_node: TreeNode
    mamba_exist: bool = False


@dataclass(slots=True)
class InsertContext:
    """One insert as every component's insert hook sees it, built once per `insert` so a
    hook takes it and the node it acts on instead of the same five arguments each.

    `value`: the caller's full-KV slots floored to whole pages, one per key unit; `actions`:
    the frees the cache applies, in order, once the hooks ran; `leaf_value`: the new leaf's
    full-KV slots (a copy), set before `commit_insert` and None when the insert made no leaf.
    """

    params: InsertParams
    value: Slots
    actions: list[FreeSlots]
    leaf_value: Slots | None = None


@dataclass(frozen=True, slots=True)
class EvictParams:
    num_tokens: int = 0
    swa_num_tokens: int = 0
    mamba_num: int = 0
    extra: Mapping[str, int] | None = None  # units per external component, by name


@dataclass(frozen=True, slots=True)
class EvictResult:
    num_tokens_evicted: int = 0
    swa_num_tokens_evicted: int = 0
    mamba_num_evicted: int = 0
    extra_evicted: Mapping[str, int] | None = None  # set when the cache has external ones


@dataclass(frozen=True, slots=True)
class IncLockRefResult:
    """A lock receipt: give it back to `dec_lock_ref` exactly once.

    `delta` is the number of full-KV units that moved from evictable to protected.
    `component_lock_uuids` holds each component's boundary marker (SWA window), `None` when
    its locked segment reached the root.
    """

    receipt_id: int
    node: TreeNode
    delta: int
    component_lock_uuids: dict[ComponentKey, int | None]
    skipped_lock_components: tuple[ComponentKey, ...] = ()

    def to_dec_params(self) -> DecLockRefParams:
        return DecLockRefParams(self.receipt_id, self.node)


@dataclass(frozen=True, slots=True)
class DecLockRefParams:
    receipt_id: int
    node: TreeNode


@dataclass(eq=False)
class Req:
    """The request record the cache reads and writes (not an engine's whole request).

    The caller fills `token_ids` (prompt plus the tokens generated so far), `req_pool_idx` (its
    row in `ReqToTokenPool`), `kv_committed_len` (row entries `[0, here)` hold computed KV) and
    `kv_allocated_len` (row entries `[0, here)` are slots this request owns or shares with the
    tree). The cache maintains the rest: the tree owns row entries `[0, cache_protected_len)`,
    kept alive by `lock`, which is anchored at `last_node`.

    Mamba fields (see `uniradix.cache.mamba_requests` for the protocol), all set by the cache at
    `match_prefix(MatchPrefixParams(key, req=req))` and cleared when the request finishes:
    `mamba_pool_idx` is the request's working state slot (the state after
    `token_ids[:kv_committed_len]`); in extra-buffer mode `mamba_ping_pong` holds the two
    tracking entries (a slot, or None while the entry holds no state), `mamba_next_track_idx`
    the entry the runner writes next, and `mamba_last_track_seqlen` the position whose state
    the other entry holds (None: nothing tracked since the last publish).

    `checkpoint_seqlens` (set by the caller, e.g. `uniradix.sim.placement`) are page-aligned
    positions where the next request is likely to branch: the SWA component keeps the window
    ending at each one live while the request runs (at most one window more than it would),
    so the tree receives it.

    `packed_key` (maintained by the cache) is the packed key of the computed tokens, grown by
    each `cache_unfinished_req` so that a chunk costs what it adds, not the whole prompt;
    `token_ids` may be an `array("q")`, which packs with one copy.
    """

    token_ids: Tokens
    req_pool_idx: int | None = None
    kv_committed_len: int = 0
    kv_allocated_len: int = 0
    extra_key: str | None = None
    priority: int = 0
    cache_protected_len: int = 0
    cache_inserted_len: int = 0
    last_node: TreeNode | None = None
    lock: IncLockRefResult | None = None
    swa_evicted_seqlen: int = 0
    mamba_pool_idx: int | None = None
    mamba_ping_pong: list[int | None] | None = None
    mamba_next_track_idx: int = 0
    mamba_last_track_seqlen: int | None = None
    session_id: str | None = None  # with the session cache, a finished turn covers its leaf
    checkpoint_seqlens: tuple[int, ...] = ()
    packed_key: GrowingKey | None = None
