"""Transfer engines: ordering, acks exactly once, wait, close with work queued, failures."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch

from tests.tiers.engines import CUDA_MARKS, ENGINES, device_of, make_engine
from tests.tiers.pools import random_kv_pool, same_bits
from uniradix.memory.host_kv import HostKVPool
from uniradix.tiers.async_engine import ThreadTransferEngine
from uniradix.tiers.copiers import KVCopier
from uniradix.tiers.transfer import CopyOp, Direction
from uniradix.types import Slots

D2H = Direction.D2H


class _Recorder:
    """A copier that records the order of its copies; can be held shut or made to fail."""

    def __init__(self, fail_on: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_on = fail_on

    def copy(self, direction: Direction, src: Slots, dst: Slots) -> int:
        self.gate.wait()
        if int(src[0]) in self.fail_on:
            raise RuntimeError(f"copy of {int(src[0])} failed")
        self.calls.append(int(src[0]))
        return 10


def _op(i: int, pool: str = "rec") -> CopyOp:
    return CopyOp(pool, D2H, np.array([i]), np.array([i]))


def test_many_batches_are_acked_once_each_in_order() -> None:
    recorder = _Recorder()
    engine = ThreadTransferEngine({"rec": recorder})
    rng = random.Random(0)
    tickets, acked = [], []
    for i in range(200):
        tickets.append(engine.submit([_op(i), _op(1000 + i)]))
        if rng.random() < 0.2:
            engine.wait(rng.choice(tickets))
        if rng.random() < 0.3:
            acked += engine.poll()
    engine.wait(tickets[-1])
    acked += engine.poll()
    assert acked == tickets == list(range(1, 201))
    assert engine.poll() == [] and engine.failed() == []
    assert recorder.calls == [x for i in range(200) for x in (i, 1000 + i)]
    assert engine.bytes_moved == {D2H: 4000, Direction.H2D: 0}
    engine.close()


def test_wait_returns_once_the_data_is_there() -> None:
    source = random_kv_pool(64, seed=3)
    host = HostKVPool.like(source, 64, 4, "page_first")
    engine = ThreadTransferEngine({"full": KVCopier(source, host)})
    tickets = [
        engine.submit([CopyOp("full", D2H, np.arange(s, s + 4), np.arange(s, s + 4))])
        for s in range(4, 64, 4)
    ]
    engine.wait(tickets[-1])
    got_k, _ = host.get_kv(2, torch.arange(4, 64))
    assert same_bits(got_k, source.k_buffers[2][4:64])
    assert engine.poll() == tickets
    engine.close()


def test_close_finishes_queued_work_first() -> None:
    recorder = _Recorder()
    recorder.gate.clear()  # the worker blocks inside the first copy
    engine = ThreadTransferEngine({"rec": recorder})
    tickets = [engine.submit([_op(i)]) for i in range(30)]
    assert engine.poll() == []
    threading.Timer(0.05, recorder.gate.set).start()
    engine.close()
    assert engine.poll() == tickets and recorder.calls == list(range(30))
    engine.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit([_op(0)])


@pytest.mark.parametrize("engine_kind", ["sync", "thread"])
def test_a_failing_copy_is_reported_and_later_batches_run(engine_kind: str) -> None:
    recorder = _Recorder(fail_on={3})
    engine = make_engine(engine_kind, {"rec": recorder})
    tickets = [engine.submit([_op(i), _op(100 + i)]) for i in range(6)]
    for ticket in tickets:
        engine.wait(ticket)
    assert engine.failed() == []  # reported only once polled
    assert engine.poll() == tickets
    assert engine.failed() == [tickets[3]]
    assert engine.failed() == []
    # The failing batch stopped at its failing op; every other batch ran whole.
    assert recorder.calls == [x for i in range(6) if i != 3 for x in (i, 100 + i)]
    engine.close()


@pytest.mark.parametrize("engine_kind", ENGINES)
def test_bad_indices_fail_the_ticket_not_the_engine(engine_kind: str) -> None:
    source = random_kv_pool(32, device_of(engine_kind))
    engine = make_engine(engine_kind, {"full": KVCopier(source, HostKVPool.like(source, 16))})
    bad = engine.submit([CopyOp("full", D2H, np.array([5]), np.array([99]))])
    good = engine.submit([CopyOp("full", D2H, np.array([5]), np.array([9]))])
    engine.wait(good)
    assert engine.poll() == [bad, good] and engine.failed() == [bad]
    engine.close()


@pytest.mark.parametrize("engine_kind", ["thread", pytest.param("cuda", marks=CUDA_MARKS)])
def test_waiting_on_a_ticket_never_issued_raises(engine_kind: str) -> None:
    engine = make_engine(engine_kind, {})
    engine.submit([])
    with pytest.raises(ValueError, match="ticket 2 was never issued"):
        engine.wait(2)
    engine.close()
