"""KV events for routers: the cache's executed stores and removes as vLLM / SGLang
`BlockStored` / `BlockRemoved` / `AllBlocksCleared` batches over ZeroMQ, and an index that
subscribes to them (docs/events.md)."""

from uniradix.events.index import IndexPublisher, KVEventIndex
from uniradix.events.publisher import KVEventsConfig, NullEventPublisher, ZmqEventPublisher
from uniradix.events.recorder import EventRecorder
from uniradix.events.stream import KVEventStream
from uniradix.events.types import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from uniradix.events.wire import WIRE_SHAPES, decode_batch, encode_batch

__all__ = [
    "WIRE_SHAPES",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "EventRecorder",
    "IndexPublisher",
    "KVEventBatch",
    "KVEventIndex",
    "KVEventStream",
    "KVEventsConfig",
    "NullEventPublisher",
    "ZmqEventPublisher",
    "decode_batch",
    "encode_batch",
]
