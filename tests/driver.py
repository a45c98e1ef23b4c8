"""A minimal scheduler for tests: admits, prefills in chunks, decodes and finishes requests
through the public cache API, and knows exactly which slots each running request holds."""

from __future__ import annotations

from uniradix import EvictParams, MatchPrefixParams, Req, UnifiedRadixCache


class MiniScheduler:
    def __init__(self, cache: UnifiedRadixCache) -> None:
        self.cache = cache
        self.running: list[Req] = []
        self.hit_tokens = 0

    def held_by_requests(self) -> dict[str, int]:
        return {"full": sum(r.kv_allocated_len - r.cache_protected_len for r in self.running)}

    def check(self) -> None:
        self.cache.check_invariants(self.held_by_requests())

    def _alloc(self, num_tokens: int):  # type: ignore[no-untyped-def]
        allocator = self.cache.pools.kv_allocator
        short = num_tokens - allocator.available_size()
        if short > 0:
            self.cache.evict(EvictParams(num_tokens=short))
        return allocator.alloc(num_tokens)

    def admit(self, tokens: list[int], extra_key: str | None = None) -> Req | None:
        """Match, lock and reserve a row; None when no row is free."""
        cache = self.cache
        row = cache.pools.req_to_token_pool.alloc()
        if row is None:
            return None
        req = Req(token_ids=list(tokens), req_pool_idx=row, extra_key=extra_key)
        prompt_key = cache.make_key(tokens[:-1], extra_key)  # the last token is always computed
        m = cache.match_prefix(MatchPrefixParams(prompt_key, req=req))
        m = cache.host_tier.load_back(m, req=req)  # the host hit, if any, back on the device
        req.lock = cache.inc_lock_ref(m.last_device_node)
        req.last_node = m.last_device_node
        cache.pools.req_to_token_pool.write(row, 0, m.device_indices)
        req.cache_protected_len = req.kv_committed_len = req.kv_allocated_len = m.device_prefix_len
        self.hit_tokens += m.device_prefix_len
        self.running.append(req)
        return req

    def extend(self, req: Req, num_tokens: int) -> bool:
        """Computes the KV of the next `num_tokens` tokens; False when the pool is full."""
        ps = self.cache.page_size
        end = req.kv_committed_len + num_tokens
        assert end <= len(req.token_ids)
        need = -(-end // ps) * ps - req.kv_allocated_len
        if need > 0:
            slots = self._alloc(need)
            if slots is None:
                return False
            self.cache.pools.req_to_token_pool.write(req.req_pool_idx, req.kv_allocated_len, slots)  # type: ignore[arg-type]
            req.kv_allocated_len += need
        req.kv_committed_len = end
        return True

    def chunk(self, req: Req, num_tokens: int) -> bool:
        if not self.extend(req, num_tokens):
            return False
        self.cache.cache_unfinished_req(req)
        return True

    def prefill_in_chunks(
        self, tokens: list[int], chunk_size: int, checkpoints: tuple[int, ...] = ()
    ) -> Req:
        """Admits `tokens` (checkpoints at `checkpoints`) and prefills them `chunk_size` at a
        time, freeing the out-of-window slots between chunks as a scheduler does."""
        req = self.admit(tokens)
        assert req is not None
        req.checkpoint_seqlens = checkpoints
        while req.kv_committed_len < len(tokens):
            if req.kv_committed_len:
                self.cache.free_out_of_window_slots(req)
            assert self.chunk(req, min(chunk_size, len(tokens) - req.kv_committed_len))
        return req

    def finish(self, req: Req, is_insert: bool = True) -> None:
        self.cache.cache_finished_req(req, is_insert=is_insert)
        self.running.remove(req)
