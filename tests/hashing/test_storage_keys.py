import pytest

from uniradix.hashing.page import namespace_seed, page_digests
from uniradix.key import RadixKey
from uniradix.storage import KeySpace


def space(**kw: object) -> KeySpace:
    base: dict[str, object] = dict(
        model_fingerprint="org/model@rev1",
        kv_dtype="bfloat16",
        layout="layer_first",
        page_size=4,
        pool="full",
    )
    base.update(kw)
    return KeySpace(**base)  # type: ignore[arg-type]


def test_key_binds_the_page_digest_to_the_key_space() -> None:
    ks = space()
    digests = page_digests(RadixKey(list(range(12))).units, 4)
    keys = ks.keys_for(RadixKey(list(range(13))))  # trailing partial page has no key
    assert [k.digest for k in keys] == digests
    tag = f".{{{digests[0][:4].hex()}}}"  # the first page of its group: its own digest
    assert keys[0].name == f"ur2.{ks.fingerprint.hex()}.{digests[0].hex()}{tag}"
    assert keys[0].stem == f"ur2.{ks.fingerprint.hex()}.{digests[0].hex()}"
    assert all(k.fingerprint == ks.fingerprint for k in keys)
    assert ks.key(digests[1], digests[0]) == keys[1]


def test_a_chains_pages_share_a_tag_per_group() -> None:
    ks = space(group_pages=3)
    tokens = list(range(4 * 8))
    keys = ks.keys_for(RadixKey(tokens))
    assert [k.tag for k in keys[:3]] == [f".{{{keys[0].digest[:4].hex()}}}"] * 3
    assert [k.tag for k in keys[3:6]] == [f".{{{keys[3].digest[:4].hex()}}}"] * 3
    assert keys[6].tag == f".{{{keys[6].digest[:4].hex()}}}" and keys[6].tag != keys[3].tag
    # A pure function of the prefix: a shorter prompt's keys are the longer one's first.
    for n in range(1, 8):
        assert ks.keys_for(RadixKey(tokens[: 4 * n])) == keys[:n]
    # Another pool's keys for the same pages keep the tags (same slots), not the names.
    swa = space(group_pages=3, pool="swa").same_pages(keys[4:7])
    assert [k.tag for k in swa] == [k.tag for k in keys[4:7]]
    assert [k.digest for k in swa] == [k.digest for k in keys[4:7]]
    assert swa == space(group_pages=3, pool="swa").keys_for(RadixKey(tokens))[4:7]


@pytest.mark.parametrize(
    "change",
    [
        {"model_fingerprint": "org/model@rev2"},
        {"kv_dtype": "float8_e4m3fn"},
        {"layout": "page_first"},
        {"page_size": 8},
        {"pool": "swa"},
        {"shard": "tp1of2"},
    ],
)
def test_every_field_changes_every_key(change: dict[str, object]) -> None:
    tokens = RadixKey(list(range(64)))
    a, b = space(), space(**change)
    assert a.fingerprint != b.fingerprint
    assert not {k.name for k in a.keys_for(tokens)} & {k.name for k in b.keys_for(tokens)}


def test_framing_separates_fields() -> None:
    assert (
        space(kv_dtype="ab", layout="c").fingerprint != space(kv_dtype="a", layout="bc").fingerprint
    )


def test_extra_key_and_salt_seed_the_chain() -> None:
    ks = space()
    plain = ks.keys_for(RadixKey(list(range(8))))
    lora = ks.keys_for(RadixKey(list(range(8)), extra_key="lora-a"))
    salted = ks.keys_for(RadixKey(list(range(8))), cache_salt="lora-a")
    assert len({plain[0].name, lora[0].name, salted[0].name}) == 3
    seed = namespace_seed("lora-a", None)
    assert lora[0].digest == page_digests(RadixKey(list(range(4))).units, 4, seed)[0]


def test_keys_are_stable_across_processes() -> None:
    # No per-process randomness (hash seeds): a fixed input gives a fixed key.
    ks = space()
    assert (
        ks.fingerprint.hex()
        == KeySpace("org/model@rev1", "bfloat16", "layer_first", 4, "full").fingerprint.hex()
    )
    assert len(ks.keys_for(RadixKey([1, 2, 3, 4]))[0].name) == 3 + 1 + 32 + 1 + 64 + 11


@pytest.mark.parametrize(
    "bad",
    [
        {"model_fingerprint": ""},
        {"page_size": 0},
        {"pool": ""},
        {"kv_dtype": ""},
        {"page_size": 2.0},
        {"group_pages": 0},
    ],
)
def test_bad_fields_raise(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        space(**bad)


def test_bad_digest_length_raises() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        space().key(b"x" * 31, b"x" * 32)


def test_mixed_narrow_and_wide_pages_hash_page_by_page() -> None:
    # page_digests converts a narrow run at once; a run with a wide page must still hash
    # each page in its own encoding, exactly as page-by-page calls do.
    units = RadixKey([1, 2, 3, 1 << 40, 5, 6, 7, 8]).units
    whole = page_digests(units, 2)
    prior = None
    for p in range(4):
        (d,) = page_digests(units[16 * p : 16 * (p + 1)], 2, prior)
        assert whole[p] == d
        prior = d
