"""Builds each kind of transfer engine over the same copiers, for tests run on every one."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch

from uniradix.tiers.async_engine import CudaTransferEngine, ThreadTransferEngine
from uniradix.tiers.transfer import Copier, SyncTransferEngine, TransferEngine

CUDA_MARKS = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
ENGINES = ["sync", "thread", pytest.param("cuda", marks=CUDA_MARKS)]


def device_of(kind: str) -> str:
    return "cuda" if kind == "cuda" else "cpu"


def make_engine(kind: str, copiers: Mapping[str, Copier]) -> TransferEngine:
    if kind == "sync":
        return SyncTransferEngine(copiers)
    if kind == "thread":
        return ThreadTransferEngine(copiers)
    return CudaTransferEngine(copiers, "cuda")


def drain(engine: TransferEngine, tickets: list[int]) -> list[int]:
    """Waits for every ticket, then returns what `poll` acks."""
    for ticket in tickets:
        engine.wait(ticket)
    return engine.poll()
