"""The SGLang 0.5.23 side of the side-by-side benchmark. Runs only inside `.peer-venv`.

    .peer-venv/bin/python benchmarks/peer/sglang_driver.py JOBS.json OUT.json
    .peer-venv/bin/python benchmarks/peer/sglang_driver.py --serve

With `--serve` it reads one JSON command per line from stdin and answers each with one line
`RESULT <json>` on stdout (other output SGLang may print is not prefixed): a whole job, or a
stream job played in chunks the caller interleaves with its own side (see `serve`); EOF ends
it.

JOBS.json is a list of jobs, each `{"kind": "stream", "config": "full"|"full+swa"|
"full+mamba", "page_size": P, "pool_tokens": N, "stream": StreamSpec dict}` or
`{"kind": "scale", ...}` (see `benchmarks/scale.py`). The tree core (`python` or `rust`) is
chosen for the whole process by `SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND`, which must be set
before SGLang is imported; each result records the core class that was really built, so a
silent fallback would show. OUT.json receives one result per job.

The cache is SGLang's own `UnifiedRadixCache` on its real pools on CPU (bf16, 1 KV head of
dim 8): `MHATokenToKVPool` + `TokenToKVPoolAllocator` (page 1) or
`PagedTokenToKVPoolAllocator` (page > 1); `SWAKVPool` + `SWATokenToKVPoolAllocator` (SWA pool
= full pool, window 128); `HybridReqToTokenPool` with a tiny Mamba2 state (512 slots) and
`HybridLinearKVPool`. It is played by `benchmarks/ops.py`, the same code as uniradix.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stubs import install_stubs  # noqa: E402

STUBBED = install_stubs()

import torch  # noqa: E402
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape  # noqa: E402
from sglang.srt.mem_cache.allocator import (  # noqa: E402
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import (  # noqa: E402
    HybridLinearKVPool,
    HybridReqToTokenPool,
    MHATokenToKVPool,
    ReqToTokenPool,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler  # noqa: E402

from benchmarks.ops import Measurement  # noqa: E402
from benchmarks.streams import StreamSpec, requests  # noqa: E402

DTYPE = torch.bfloat16
HEAD_DIM = 8
SWA_WINDOW = 128
MAMBA_SLOTS = 512
MAX_CONTEXT = 16


def _server_args(page_size: int) -> None:
    args = ServerArgs(model_path="dummy", page_size=page_size)
    # Pre-seeding the chunk size keeps SGLang from importing its Triton kernels and loading
    # a model config to compute it (the hook its own unit tests use).
    args._mamba_cache_chunk_size = 64
    set_global_server_args_for_scheduler(args)


def _full_allocator(size: int, page_size: int, kv: Any) -> Any:
    if page_size == 1:
        return TokenToKVPoolAllocator(size, DTYPE, "cpu", kv, need_sort=False)
    return PagedTokenToKVPoolAllocator(size, page_size, DTYPE, "cpu", kv, need_sort=False)


def build_cache(
    config: str, page_size: int, pool_tokens: int, kv_events: bool = False
) -> UnifiedRadixCache:
    """`kv_events`: the cache records SGLang's KV cache events (for `take_events`)."""
    _server_args(page_size)
    extra: dict[str, Any] = {}
    if config == "full":
        req_pool = ReqToTokenPool(2, MAX_CONTEXT, "cpu", enable_memory_saver=False)
        kv = MHATokenToKVPool(pool_tokens, page_size, DTYPE, 1, HEAD_DIM, 2, "cpu", False)
        allocator = _full_allocator(pool_tokens, page_size, kv)
        components: tuple[ComponentType, ...] = (ComponentType.FULL,)
    elif config == "full+swa":
        req_pool = ReqToTokenPool(2, MAX_CONTEXT, "cpu", enable_memory_saver=False)
        kv = SWAKVPool(pool_tokens, pool_tokens, page_size, DTYPE, 1, HEAD_DIM, [1], [0], "cpu")
        allocator = SWATokenToKVPoolAllocator(
            pool_tokens, pool_tokens, page_size, DTYPE, "cpu", kv, need_sort=False
        )
        components = (ComponentType.FULL, ComponentType.SWA)
        extra["sliding_window_size"] = SWA_WINDOW
    elif config == "full+mamba":
        shape = Mamba2StateShape.create(
            tp_world_size=1,
            intermediate_size=32,
            n_groups=1,
            num_heads=2,
            head_dim=16,
            state_size=8,
            conv_kernel=4,
        )
        cache_params = Mamba2CacheParams(shape=shape, layers=[1])
        req_pool = HybridReqToTokenPool(
            size=2,
            mamba_size=MAMBA_SLOTS,
            mamba_spec_state_size=MAMBA_SLOTS,
            max_context_len=MAX_CONTEXT,
            device="cpu",
            enable_memory_saver=False,
            cache_params=cache_params,
            mamba_layer_ids=[1],
            enable_mamba_extra_buffer=page_size > 1,
        )
        kv = HybridLinearKVPool(
            pool_tokens,
            DTYPE,
            page_size,
            1,
            HEAD_DIM,
            [0],
            "cpu",
            req_pool.mamba_pool,
        )
        allocator = _full_allocator(pool_tokens, page_size, kv)
        components = (ComponentType.FULL, ComponentType.MAMBA)
        # MambaComponent asserts page 1 unless the extra (ping-pong) buffer is on.
        extra["enable_mamba_extra_buffer"] = page_size > 1
    else:
        raise ValueError(f"unknown config {config!r}")
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=req_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=page_size,
        tree_components=components,
        enable_kv_cache_events=kv_events,
        **extra,
    )
    return UnifiedRadixCache(params)


class SGLangAdapter:
    """Builds SGLang's params and reads its results for `benchmarks.ops.play`."""

    def __init__(self, cache: UnifiedRadixCache, page_size: int) -> None:
        self.cache = cache
        self.page_size = page_size
        self._allocator = cache.token_to_kv_pool_allocator
        self._swa = ComponentType.SWA in cache.tree_components
        self._mamba = (
            cache.req_to_token_pool.mamba_allocator
            if ComponentType.MAMBA in cache.tree_components
            else None
        )

    def match_params(self, prompt: list[int]) -> MatchPrefixParams:
        return MatchPrefixParams(key=RadixKey(_array(prompt)))

    def matched(self, result: Any) -> tuple[int, Any]:
        return result.device_prefix_len, result.last_device_node

    def prefix_indices(self, result: Any, node: Any, num_tokens: int) -> torch.Tensor:
        return self.cache.path_device_indices(node)[:num_tokens]

    def evict_params(self, num_tokens: int) -> EvictParams | None:
        if self._swa:
            full = num_tokens - self._allocator.full_available_size()
            swa = num_tokens - self._allocator.swa_available_size()
        else:
            full, swa = num_tokens - self._allocator.available_size(), 0
        mamba = int(self._mamba is not None and self._mamba.available_size() < 1)
        if full <= 0 and swa <= 0 and not mamba:
            return None
        return EvictParams(num_tokens=max(full, 0), swa_num_tokens=max(swa, 0), mamba_num=mamba)

    def alloc(self, num_tokens: int) -> torch.Tensor | None:
        if not self._swa or self.page_size == 1:
            return self._allocator.alloc(num_tokens)
        # The paged SWA allocator only offers the scheduler's alloc_extend (a Triton kernel,
        # with a slow CPU fallback); whole pages from both halves plus the full->SWA mapping
        # are the same allocation, done with the allocator's own calls.
        a = self._allocator
        if num_tokens > min(a.full_available_size(), a.swa_available_size()):
            return None
        full = a.full_attn_allocator.alloc(num_tokens)
        a.set_full_to_swa_mapping(full, a.swa_attn_allocator.alloc(num_tokens))
        return full

    def alloc_state(self) -> tuple[bool, torch.Tensor | None]:
        if self._mamba is None:
            return True, None
        slot = self._mamba.alloc(1)
        return slot is not None, slot

    def insert_params(
        self, tokens: list[int], value: torch.Tensor, prev_len: int, state: torch.Tensor | None
    ) -> InsertParams:
        return InsertParams(
            key=RadixKey(_array(tokens)), value=value, prev_prefix_len=prev_len, mamba_value=state
        )

    def after_insert(self, result: Any, state: torch.Tensor | None) -> None:
        if state is not None and result.mamba_exist:
            self._mamba.free(state)

    def dec_params(self, receipt: Any) -> Any:
        return receipt.to_dec_params()

    def free(self, slots: torch.Tensor) -> None:
        self._allocator.free(slots)

    def cached_tokens(self) -> int:
        return int(self.cache.full_evictable_size() + self.cache.full_protected_size())

    def check(self) -> None:
        if self.cache.full_protected_size():
            raise AssertionError("locks left after the stream")
        self.cache.sanity_check()


def _array(tokens: list[int]) -> Any:
    from array import array

    return array("q", tokens)


def _maker(job: dict[str, Any], built: list[str]) -> Callable[[int], SGLangAdapter]:
    config, ps = job["config"], job["page_size"]

    def make(pool_tokens: int) -> SGLangAdapter:
        cache = build_cache(config, ps, pool_tokens)
        built.append(type(cache.tree_core).__name__)
        return SGLangAdapter(cache, ps)

    return make


def start_job(job: dict[str, Any], built: list[str]) -> Measurement:
    """A stream job's measurement, ready to `step` (see `benchmarks.ops.Measurement`)."""
    make, spec, pool = _maker(job, built), StreamSpec(**job["stream"]), job["pool_tokens"]
    return Measurement(
        lambda: make(pool), lambda: requests(spec), heap=job.get("heap", True), batch=spec.batch
    )


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    built: list[str] = []
    if job["kind"] == "scale":
        from benchmarks.scale import run_scale

        out = run_scale(_maker(job, built), job)
    else:
        out = start_job(job, built).finish()
    out["tree_core_class"] = built[0]
    return out


def serve() -> None:
    """One JSON command per line, one `RESULT <json>` line per command: `{"job": J}` runs a
    whole job; `{"start": J}` starts a stream job, `{"step": N}` plays its next N batches
    (answering whether it is done), `{"finish": true}` ends it and answers its result."""
    current: tuple[dict[str, Any], Measurement, list[str]] | None = None
    for line in sys.stdin:
        if not line.strip():
            break
        command = json.loads(line)
        answer: dict[str, Any]
        if "job" in command:
            answer = run_job(command["job"])
            answer["job"] = command["job"]
        elif "start" in command:
            built: list[str] = []
            current = (command["start"], start_job(command["start"], built), built)
            answer = {"started": True}
        elif "step" in command:
            assert current is not None, "step before start"
            answer = {"done": current[1].step(int(command["step"]))}
        else:
            assert current is not None, "finish before start"
            job, measurement, built = current
            answer = measurement.finish()
            answer["job"], answer["tree_core_class"] = job, built[0]
            current = None
        answer["stubbed_modules"] = STUBBED
        print("RESULT " + json.dumps(answer), flush=True)


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    jobs = json.loads(Path(sys.argv[1]).read_text())
    results = []
    for job in jobs:
        t0 = time.perf_counter()
        result = run_job(job)
        result["job"] = job
        result["stubbed_modules"] = STUBBED
        results.append(result)
        print(
            f"sglang {job['config']} {job.get('stream')} done in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
        )
        Path(sys.argv[2]).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
