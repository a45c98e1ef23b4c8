import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sim.specs import specs_from
from uniradix.sim.ideal import PrefixTrie, ideal_hits


def test_ideal_rounding_last_token_and_pages() -> None:
    base = list(range(1, 11))  # 10 tokens
    specs = specs_from(
        [base, base, [*base[:7], 99, 98], [*base, 5, 6]],
        [[70, 71], [72], [73], [74]],
    )
    # #1: same prompt, but the last token is always computed: 9; #2: lcp 7;
    # #3: #0 left base + [70] (its last output is never fed back); 5 != 70: lcp 10
    assert ideal_hits(specs, page_size=1) == [0, 9, 7, 10]
    assert ideal_hits(specs, page_size=4) == [0, 8, 4, 8]


def test_multi_turn_reuses_the_answer() -> None:
    specs = specs_from([[1, 2, 3], [1, 2, 3, 7, 8, 9]], [[7, 8, 5], [1]])
    assert ideal_hits(specs) == [0, 5]


def _brute_lcp(seqs: list[list[int]], query: list[int]) -> int:
    best = 0
    for s in seqs:
        n = 0
        while n < min(len(s), len(query)) and s[n] == query[n]:
            n += 1
        best = max(best, n)
    return best


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(0, 1), min_size=0, max_size=150)),
        min_size=1,
        max_size=12,
    )
)
def test_trie_matches_brute_force(parts: list[tuple[int, list[int]]]) -> None:
    # sequences that share long prefixes: a common stem cut at random points plus noise
    stem = [i % 3 for i in range(192)]
    trie, seen = PrefixTrie(), []
    for cut, tail in parts:
        seq = stem[: cut * 50] + tail or [0]
        assert trie.longest_prefix(np.array(seq, dtype=np.int64)) == _brute_lcp(seen, seq)
        trie.insert(np.array(seq, dtype=np.int64))
        seen.append(seq)


def test_a_sequence_ending_inside_an_edge_splits_it() -> None:
    trie = PrefixTrie()
    trie.insert(np.arange(10, dtype=np.int64))
    trie.insert(np.arange(4, dtype=np.int64))  # a prefix of the edge: split, nothing new
    assert trie.longest_prefix(np.arange(3, dtype=np.int64)) == 3
    assert trie.longest_prefix(np.array([0, 1, 2, 3, 9], dtype=np.int64)) == 4
    assert trie.longest_prefix(np.arange(12, dtype=np.int64)) == 10
    assert trie.longest_prefix(np.array([5], dtype=np.int64)) == 0
