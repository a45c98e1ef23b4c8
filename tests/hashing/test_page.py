import pytest

from uniradix.hashing.page import digest_to_int64, namespace_seed, page_digests, salt_seed
from uniradix.key import RadixKey

pytestmark = pytest.mark.usefixtures("python_and_native")  # every test on both paths


def hashes(tokens: list[int], page_size: int) -> list[int]:
    return [digest_to_int64(d) for d in page_digests(RadixKey(tokens).units, page_size)]


def test_golden_vectors_of_the_sglang_router() -> None:
    # kv_events.md (c): the vectors the SGLang router's hash.rs tests pin.
    assert hashes([1, 2, 3, 4], 4) == [-3488128144981237669]
    assert hashes([1, 2, 3, 4, 5], 4) == [-3488128144981237669]  # partial page not hashed
    assert hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)[0] == -3488128144981237669
    assert hashes([10, 20, 30, 40, 50, 60, 70, 80], 2) == [
        978178666101069530,
        -895308556211281782,
        -8033692805846017938,
        835415944263129316,
    ]


def test_chain_continues_across_calls() -> None:
    units = RadixKey([10, 20, 30, 40, 50, 60, 70, 80]).units
    whole = page_digests(units, 2)
    tail = page_digests(units[32:], 2, prior=whole[1])
    assert tail == whole[2:]


def test_wide_units_do_not_collide_with_narrow_ones() -> None:
    narrow = page_digests(RadixKey([1, 0]).units, 2)
    wide = page_digests(RadixKey([1 << 32]).units, 1)
    assert narrow[0] != wide[0]
    assert len(page_digests(RadixKey([-1, 2**40]).units, 2)) == 1


def test_seeds_separate_namespaces() -> None:
    assert salt_seed(None) is None and namespace_seed(None, None) is None
    seeds = {namespace_seed("a", "bc"), namespace_seed("ab", "c"), namespace_seed("a", None)}
    assert len(seeds) == 3
    units = RadixKey([1, 2, 3, 4]).units
    assert page_digests(units, 4, salt_seed("s")) != page_digests(units, 4)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="page_size"):
        page_digests(b"", 0)
    with pytest.raises(ValueError, match="32 bytes"):
        page_digests(b"", 1, prior=b"x")
