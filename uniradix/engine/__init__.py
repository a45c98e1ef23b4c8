"""Reference engine: a tiny hybrid model whose KV and states live in the cache's pools,
the no-cache store it is checked against, and greedy generation on both."""

from uniradix.engine.dense_state import DenseRequestState, reference_generate
from uniradix.engine.engine import Engine, EngineConfig, GenerateResult, Verification, verify
from uniradix.engine.model import ModelConfig, TinyHybridModel
from uniradix.engine.state import RequestState

__all__ = [
    "DenseRequestState",
    "Engine",
    "EngineConfig",
    "GenerateResult",
    "ModelConfig",
    "RequestState",
    "TinyHybridModel",
    "Verification",
    "reference_generate",
    "verify",
]
