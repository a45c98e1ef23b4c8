"""PoolRunner: the scheduler's `ModelRunner` that computes, with the tiny model on the pools.

Each `ForwardEntry` of a batch runs `req.token_ids[start:end]` at positions `[start, end)` on
the request's `PoolRequestState`; a sampling entry returns the greedy token of the last
position. Prefill entries run one by one (their lengths differ); a decode batch runs as one
batched `decode` call.

Mamba tracking (extra-buffer mode): an entry with `track_seqlen = s` also needs the state after
`token_ids[:s]` in the request's track slot. The state only exists between calls, so a prefill
entry with `start < s < end` is split::

    [start ........ s) copy working slot -> track slot [s ........ end)

and a decode entry (`s == end`) copies after the step. The scheduler commits the track.

The runner keeps, per request id and output index, the logits row each token was chosen from,
for verification against the no-cache reference.
"""

from __future__ import annotations

import torch

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.cache.mamba_requests import MambaRequests
from uniradix.engine.model import TinyHybridModel
from uniradix.engine.pool_state import PoolLayout
from uniradix.engine.state import RequestState
from uniradix.sim.batch import ForwardBatch, ForwardEntry


class PoolRunner:
    def __init__(self, model: TinyHybridModel, cache: UnifiedRadixCache) -> None:
        self.model = model
        self.cache = cache
        self.layout = PoolLayout(model.config, cache.pools)
        self.logits: dict[int, dict[int, torch.Tensor]] = {}
        self.num_forward_tokens = 0

    def forward(self, batch: ForwardBatch) -> list[int]:
        entries = batch.entries
        if batch.is_decode:
            rows = list(self._decode(entries))
        else:
            rows = [self._prefill(e) for e in entries]
        tokens = []
        for e, row in zip(entries, rows, strict=True):
            self.num_forward_tokens += e.end - e.start
            if e.samples:
                request = e.request
                self.logits.setdefault(request.spec.rid, {})[request.num_output] = row.cpu()
                tokens.append(int(row.argmax()))
        return tokens

    def _prefill(self, entry: ForwardEntry) -> torch.Tensor:
        """Runs the entry (split at its track position); returns the last position's logits."""
        req = entry.request.req
        ids = torch.tensor(req.token_ids[entry.start : entry.end], dtype=torch.int64)
        store = self.layout.state(req)
        s = entry.track_seqlen
        if s is None or s == entry.end:
            logits = self.model.forward(ids, entry.start, store)
        else:
            if not entry.start < s < entry.end:
                raise ValueError(f"track_seqlen={s} outside ({entry.start}, {entry.end}]")
            self.model.forward(ids[: s - entry.start], entry.start, store)
            self._track(entry)
            logits = self.model.forward(ids[s - entry.start :], s, store)
        if s == entry.end:
            self._track(entry)
        return logits[-1]

    def _decode(self, entries: list[ForwardEntry]) -> torch.Tensor:
        for e in entries:
            if e.end != e.start + 1 or e.end != len(e.request.req.token_ids):
                raise ValueError(
                    f"a decode entry runs the last token: got [{e.start}, {e.end}) of "
                    f"{len(e.request.req.token_ids)} tokens"
                )
        ids = torch.tensor([e.request.req.token_ids[e.start] for e in entries], dtype=torch.int64)
        stores: list[RequestState] = [self.layout.state(e.request.req) for e in entries]
        logits = self.model.decode(ids, [e.start for e in entries], stores)
        for e in entries:
            if e.track_seqlen is not None:
                if e.track_seqlen != e.end:
                    raise ValueError(f"decode track_seqlen={e.track_seqlen} != end={e.end}")
                self._track(e)
        return logits

    def _track(self, entry: ForwardEntry) -> None:
        """Copies the working state (now after `token_ids[:track_seqlen]`) to the track slot."""
        mamba = self.cache.mamba_requests
        states = self.layout.mamba_states
        req = entry.request.req
        if not isinstance(mamba, MambaRequests) or states is None:
            raise ValueError("track_seqlen set on a cache or model without Mamba")
        assert req.mamba_pool_idx is not None
        slot = mamba.track_slot(req)
        if slot is not None:  # None: no slot to be had, the track is skipped
            states.copy(req.mamba_pool_idx, slot)
