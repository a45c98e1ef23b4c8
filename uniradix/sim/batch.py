"""What the scheduler hands out: running requests, forward batches, and the two interfaces it
talks to (the model runner that computes a batch, the listener that watches the steps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from uniradix.key import RadixKey
from uniradix.sim.request_spec import RequestSpec
from uniradix.types import EvictResult, MatchResult, Req

if TYPE_CHECKING:
    from uniradix.memory.mamba_pool import MambaReqPool


@dataclass(eq=False)
class RunningRequest:
    """A request between admission and finish. `req.token_ids` is the prompt plus the outputs
    so far; `prompt_len` is the prompt of the current admission (it includes the outputs made
    before a retraction)."""

    spec: RequestSpec
    req: Req
    prompt_len: int
    num_output: int = 0
    prefilled: bool = False
    num_admissions: int = 1
    mamba_branch: int | None = None
    host_hit_tokens: int = 0  # prefix tokens loaded back from the host tier at admission
    # The page of `req.kv_committed_len` at the last out-of-window step (-1: none yet).
    window_page: int = -1


# A named tuple: immutable, and built per request per step at a third of a frozen
# dataclass's cost.
class ForwardEntry(NamedTuple):
    """Compute the KV of `req.token_ids[start:end]` into row slots `[start, end)`; when
    `samples`, also return the next token. When `track_seqlen` is set (Mamba extra-buffer
    mode), also copy the Mamba state after `token_ids[:track_seqlen]` into the request's
    `cache.mamba_requests.track_slot(req)`; the scheduler commits it after the pass."""

    request: RunningRequest
    start: int
    end: int
    samples: bool
    track_seqlen: int | None = None


@dataclass(frozen=True)
class ForwardBatch:
    is_decode: bool
    entries: list[ForwardEntry]


class ModelRunner(Protocol):
    def forward(self, batch: ForwardBatch) -> list[int]:
        """Runs `batch`; returns one token per sampling entry, in entry order."""
        ...


class SchedulerView(Protocol):
    """The scheduler as a listener's `on_step` sees it (a protocol: the scheduler imports
    this module, so this module does not import the scheduler)."""

    @property
    def running(self) -> list[RunningRequest]: ...


class SchedulerListener(Protocol):
    """What the scheduler reports (metrics, progress). Every method is optional to act on."""

    def on_match(self, rid: int, key: RadixKey, match: MatchResult) -> None: ...
    def on_admit(self, request: RunningRequest, match: MatchResult) -> None: ...
    def on_evict(self, result: EvictResult) -> None: ...
    def on_retract(self, request: RunningRequest) -> None: ...
    def on_finish(self, request: RunningRequest) -> None: ...
    def on_step(self, scheduler: SchedulerView) -> None: ...


class NullListener:
    def on_match(self, rid: int, key: RadixKey, match: MatchResult) -> None:
        """Right after the admission match of request `rid` (admitted or not)."""
        return

    def on_admit(self, request: RunningRequest, match: MatchResult) -> None:
        return

    def on_evict(self, result: EvictResult) -> None:
        return

    def on_retract(self, request: RunningRequest) -> None:
        return

    def on_finish(self, request: RunningRequest) -> None:
        return

    def on_step(self, scheduler: SchedulerView) -> None:
        return


def held_by(running: list[RunningRequest], mamba: MambaReqPool | None) -> dict[str, int]:
    """Units per pool that `running` requests hold privately (not yet the tree's): own KV
    slots `[cache_protected_len, kv_allocated_len)`, of which SWA slots only from the
    request's SWA cursor on; Mamba working and ping-pong slots; request rows."""
    held = {"full": 0, "swa": 0, "mamba": 0, "req": len(running)}
    for r in running:
        req = r.req
        held["full"] += req.kv_allocated_len - req.cache_protected_len
        held["swa"] += req.kv_allocated_len - max(req.cache_protected_len, req.swa_evicted_seqlen)
        if mamba is not None:
            held["mamba"] += len(mamba.held_slots(req))
    return held
