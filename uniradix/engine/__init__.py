"""Reference engine: a tiny hybrid model and the no-cache store it is checked against."""

from uniradix.engine.dense_state import DenseRequestState, reference_generate
from uniradix.engine.model import ModelConfig, TinyHybridModel
from uniradix.engine.state import RequestState

__all__ = [
    "DenseRequestState",
    "ModelConfig",
    "RequestState",
    "TinyHybridModel",
    "reference_generate",
]
