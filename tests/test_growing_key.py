"""GrowingKey packs only what a request adds; its keys equal freshly packed ones."""

from array import array

import pytest

from tests.driver import MiniScheduler
from tests.helpers import make_cache
from uniradix import RadixKey
from uniradix.cache.paths import path_tail
from uniradix.key import GrowingKey


@pytest.mark.parametrize("is_bigram", [False, True])
@pytest.mark.parametrize("as_array", [False, True])
def test_grown_key_equals_the_key_packed_at_once(is_bigram, as_array):
    tokens = [7, 3, 9, 12, 5, 5, 1, 40, 2, 8]
    source = array("q", tokens) if as_array else list(tokens)
    grown = GrowingKey("ns", is_bigram)
    for n in [0, 1, 4, 4, 9, 6, 10, 2, 10]:  # grows, stays, shrinks, grows again
        key = grown.key(source, n)
        assert key == RadixKey(tokens[:n], "ns", is_bigram=is_bigram)
        assert key.extra_key == "ns" and key.is_bigram == is_bigram


def test_grown_key_rejects_a_length_past_the_tokens():
    with pytest.raises(ValueError, match="num_tokens=4"):
        GrowingKey(None, False).key([1, 2, 3], 4)


def test_path_tail_joins_only_the_nodes_past_start():
    cache = make_cache(full_tokens=64)
    sched = MiniScheduler(cache)
    req = sched.admit(list(range(100, 130)))
    for step in (8, 8, 8):
        assert sched.chunk(req, step)
    node = req.last_node
    whole = cache.path_indices(node).tolist()
    for start in (0, 5, 8, 16, 23, 24):
        tail, end = path_tail(node, start)
        assert end == 24 and tail.tolist() == whole[start:]
    with pytest.raises(ValueError, match="start=25"):
        path_tail(node, 25)


@pytest.mark.parametrize("is_eagle", [False, True])
def test_chunked_prefill_of_an_array_request_caches_what_a_list_caches(is_eagle):
    prompt = [(i * 37) % 101 for i in range(40)]
    shapes = []
    for tokens in (list(prompt), array("q", prompt)):
        cache = make_cache(full_tokens=128, page_size=4, is_eagle=is_eagle)
        sched = MiniScheduler(cache)
        req = sched.admit(list(prompt))
        req.token_ids = tokens
        for step in (6, 10, 7, 17):
            assert sched.chunk(req, step)
            sched.check()
        assert req.packed_key is not None
        sched.finish(req)
        assert req.packed_key is None
        sched.check()
        shapes.append(sorted((n.key, n.data[0].value.tolist()) for n in cache.tree.nodes()))
    assert shapes[0] == shapes[1] and shapes[0]
