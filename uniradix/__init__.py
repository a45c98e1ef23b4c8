"""uniradix: one radix tree for prefix caching of hybrid (full attention + SWA + Mamba) LLMs."""

from uniradix.cache.controller import UnifiedRadixCache
from uniradix.config import CacheConfig
from uniradix.errors import InvariantError
from uniradix.factory import build_cache
from uniradix.key import RadixKey
from uniradix.types import (
    ComponentType,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    MatchResult,
    Req,
)

__all__ = [
    "CacheConfig",
    "ComponentType",
    "EvictParams",
    "InsertParams",
    "InvariantError",
    "MatchPrefixParams",
    "MatchResult",
    "RadixKey",
    "Req",
    "UnifiedRadixCache",
    "build_cache",
]
