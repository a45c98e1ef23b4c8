"""The controller: `UnifiedRadixCache` owns pools and tiers and executes the tree's decisions."""

from uniradix.cache.controller import UnifiedRadixCache

__all__ = ["UnifiedRadixCache"]
