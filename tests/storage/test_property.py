"""Random operations on the file store with injected faults (raise before a call, or after
part of a write), random corruption, restarts and a moving clock for the breaker: after every
step the results match a model of what is stored (0 wrong data), the counters match what
happened, and the store's byte accounting matches the disk (allocated blocks, as `du`
counts them) and stays under the cap. Pages are small (packed into shared segments) or
large (a segment each)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.storage.conftest import du
from uniradix.key import RadixKey
from uniradix.storage import CircuitBreaker, KeySpace, Miss, MissReason
from uniradix.storage.file_backend import FileBackend
from uniradix.storage.page_format import Payload

KS = KeySpace("org/m@rev1", "bfloat16", "layer_first", 1, "full")
N = 12
KEYS = KS.keys_for(RadixKey(list(range(N))))
# Under these caps a segment is one block: pages over a quarter of it get their own.
DATA = [bytes([i]) * (1500 if i % 3 == 0 else 100 + i) for i in range(N)]


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class FaultyStore(FileBackend):
    """`fault` is consumed by the next store call: "raise" fails it before any effect,
    an int k fails a write after k pages were written."""

    def __init__(self, directory: Path, clock: Clock, max_bytes: int) -> None:
        super().__init__(directory, max_bytes=max_bytes, breaker=CircuitBreaker(2, 1.0, clock))
        self.fault: str | int | None = None
        self.calls = 0

    def _take(self) -> str | int | None:
        self.calls += 1
        fault, self.fault = self.fault, None
        if fault == "raise":
            raise OSError(5, "injected")
        return fault

    def _store_set(self, names: list[str], headers: list[bytes], payloads: list[Payload]) -> int:
        fault = self._take()
        if isinstance(fault, int):
            k = min(fault, len(names))
            super()._store_set(names[:k], headers[:k], payloads[:k])
            raise OSError(28, "injected after a partial write")
        return super()._store_set(names, headers, payloads)

    def _store_delete(self, names: list[str]) -> int:
        self.calls += 1  # no fault is injected into deletes: this only shows one ran
        return super()._store_delete(names)

    def _store_get(self, names: list[str]) -> list[Payload | None]:
        self._take()
        return super()._store_get(names)

    def _store_exists_prefix(self, names: list[str]) -> int:
        self._take()
        return super()._store_exists_prefix(names)


span = st.tuples(st.integers(0, N - 1), st.integers(1, N)).map(
    lambda t: (t[0], min(N, t[0] + t[1]))
)
fault = st.one_of(st.none(), st.just("raise"), st.integers(0, 4))
op = st.one_of(
    st.tuples(st.just("set"), span, fault),
    st.tuples(st.just("get"), span, fault),
    st.tuples(st.just("exists"), span, fault),
    st.tuples(st.just("delete"), span, st.none()),
    st.tuples(st.just("corrupt"), st.integers(0, N - 1), st.none()),
    st.tuples(st.just("tick"), st.floats(0.0, 1.5), st.none()),
    st.tuples(st.just("restart"), st.none(), st.none()),
)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(op, max_size=40), cap_pages=st.integers(3, N + 1))
def test_random_ops_with_faults_match_the_model(ops: list[tuple], cap_pages: int) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        directory, clock = Path(tmp), Clock()
        # The cap counts disk blocks: a large page's segment takes one, a small page shares
        # one; a new segment reserves one more for the folder.
        empty = FileBackend(directory)
        cap = empty.used_bytes + (cap_pages + 1) * empty.block_bytes
        store = FaultyStore(directory, clock, max_bytes=cap)
        stored: set[int] = set()  # pages the model says are stored and intact
        corrupt: set[int] = set()  # stored but damaged: present, never returned
        want = dict.fromkeys(("written", "read", "missed", "corrupt", "failed"), 0)
        kept_at_most = 0
        for name, arg, fault_ in [*ops, ("restart", None, None)]:  # restart: checks all
            calls = store.calls
            store.fault = fault_
            if name == "tick":
                clock.now += arg
                continue
            if name == "restart":  # a new process on the directory: counters start again
                store.close()
                store = FaultyStore(directory, clock, max_bytes=cap)
                assert store.used_bytes == du(directory) <= cap
                on_disk = {i for i in range(N) if store.locate(KEYS[i]) is not None}
                stored &= on_disk
                corrupt &= on_disk
                # It reads what the model says: no deleted page back, no wrong page.
                for i, page in enumerate(store.batch_get(KEYS)):
                    if i in stored:
                        assert isinstance(page, memoryview) and bytes(page) == DATA[i]
                    else:
                        assert isinstance(page, Miss)
                        assert page.reason is (
                            MissReason.BAD_CHECKSUM if i in corrupt else MissReason.ABSENT
                        )
                corrupt.clear()  # repaired by that read
                s = store.stats()
                want = dict.fromkeys(want, 0)
                want.update(read=s.pages_read, missed=s.pages_missed, corrupt=s.pages_corrupt)
                kept_at_most = 0
                continue
            if name == "corrupt":
                where = store.locate(KEYS[arg])
                if arg in stored and where is not None:
                    path, offset, length = where
                    raw = bytearray(path.read_bytes())
                    raw[offset + length - 1] ^= 0xFF  # the payload's last byte
                    path.write_bytes(bytes(raw))
                    stored.discard(arg)
                    corrupt.add(arg)
                continue
            lo, hi = arg
            if name == "delete":
                store.delete(KEYS[lo:hi])
                if store.calls > calls:  # an open breaker skips the delete: the pages stay
                    stored -= set(range(lo, hi))
                    corrupt -= set(range(lo, hi))
                continue
            if name == "set":
                n = store.batch_set(KEYS[lo:hi], DATA[lo:hi])
                called = store.calls > calls
                failed = called and fault_ is not None
                if not called or fault_ == "raise":
                    assert n == 0
                elif isinstance(fault_, int):
                    assert n == 0
                    new = set(range(lo, min(hi, lo + fault_))) - corrupt
                    stored |= new
                else:
                    assert n == hi - lo
                    # A page still held is kept, not written again; the cap may evict one
                    # within the batch before its turn, so only an upper bound is known.
                    kept_at_most += len(set(range(lo, hi)) & (stored | corrupt))
                    stored |= set(range(lo, hi)) - corrupt
                    want["written"] += n
            elif name == "get":
                pages = store.batch_get(KEYS[lo:hi])
                called = store.calls > calls
                failed = called and fault_ == "raise"
                for i, page in zip(range(lo, hi), pages, strict=True):
                    if not called:
                        assert isinstance(page, Miss) and page.reason is MissReason.BREAKER_OPEN
                    elif failed:
                        assert isinstance(page, Miss) and page.reason is MissReason.BACKEND_ERROR
                    elif i in stored:
                        assert isinstance(page, memoryview) and bytes(page) == DATA[i]
                    elif i in corrupt:
                        assert isinstance(page, Miss) and page.reason is MissReason.BAD_CHECKSUM
                        want["corrupt"] += 1
                    else:
                        assert isinstance(page, Miss) and page.reason is MissReason.ABSENT
                    if isinstance(page, Miss):
                        want["missed"] += 1
                    else:
                        want["read"] += 1
            else:
                hit = store.batch_exists(KEYS[lo:hi])
                called = store.calls > calls
                failed = called and fault_ == "raise"
                expect = 0
                if called and not failed:
                    while lo + expect < hi and (lo + expect) in stored | corrupt:
                        expect += 1
                assert hit == expect
            want["failed"] += int(bool(failed))
            s = store.stats()
            assert (s.pages_written + s.pages_kept, s.pages_read, s.pages_missed) == (
                want["written"], want["read"], want["missed"],
            )  # fmt: skip
            assert s.pages_kept <= kept_at_most
            assert (s.pages_corrupt, s.failed_ops) == (want["corrupt"], want["failed"])
            assert sum(s.misses_by_reason.values()) == s.pages_missed
            assert s.breaker_trips <= s.failed_ops
            # The byte accounting is the disk's, and the cap holds; eviction may drop pages.
            assert store.used_bytes == du(directory) <= cap
            on_disk = {i for i in range(N) if store.locate(KEYS[i]) is not None}
            stored &= on_disk
            corrupt &= on_disk
