import numpy as np
import pytest
import torch

from uniradix.key import RadixKey, common_prefix_len


def test_len_slice_and_tolist():
    key = RadixKey([5, 6, 7, 8, 9])
    assert len(key) == 5
    assert key[1:3].tolist() == [6, 7]
    assert key[1:3].extra_key is None
    assert RadixKey(torch.tensor([1, 2, 3])) == RadixKey(np.array([1, 2, 3]))


def test_namespace_is_part_of_identity_and_child_keys():
    a, b = RadixKey([1, 2], "lora-a"), RadixKey([1, 2], "lora-b")
    assert a != b
    assert a.child_key(0, 1) != b.child_key(0, 1)
    assert RadixKey([1, 2], "") == RadixKey([1, 2])


def test_page_aligned_floors_to_whole_pages():
    key = RadixKey(list(range(10)))
    assert len(key.page_aligned(4)) == 8
    assert key.page_aligned(1) is key


def test_bigram_view_has_one_unit_fewer():
    key = RadixKey([1, 2, 3], is_bigram=True)
    assert len(key) == 2
    assert key.tolist() == [(1 << 32) | 2, (2 << 32) | 3]
    assert len(RadixKey([1], is_bigram=True)) == 0
    with pytest.raises(ValueError, match="bigram"):
        RadixKey([-1, 2], is_bigram=True)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 9], [1, 2], 1), ([7], [8], 0)],
)
def test_common_prefix_len(a, b, expected):
    assert common_prefix_len(RadixKey(a).units, RadixKey(b).units) == expected


def test_common_prefix_len_long_keys_with_large_tokens():
    a = list(range(10_000, 20_000))
    b = a.copy()
    b[7777] = 2**40
    assert common_prefix_len(RadixKey(a).units, RadixKey(b).units) == 7777


def test_bad_tokens_raise_type_error():
    with pytest.raises(TypeError):
        RadixKey(["a"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        RadixKey(np.array([1.5]))
    with pytest.raises(TypeError):
        RadixKey([1, 2])[::2]
