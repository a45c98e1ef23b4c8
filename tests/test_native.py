"""The optional native module: built where it must be, switched off by the environment, its
SHA-256 equal to hashlib's and its page chain equal to the Python chain byte for byte."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from uniradix import native
from uniradix.hashing import page as page_hash
from uniradix.hashing.events import VllmCborHasher, vllm_none_hash
from uniradix.key import RadixKey

needs_native = pytest.mark.skipif(not native.BUILT, reason="uniradix._native was not built")


def test_native_module_is_built_when_required() -> None:
    """`scripts/test.sh` (CI) sets UNIRADIX_REQUIRE_NATIVE=1: a build that silently fell
    back to Python (the extension is optional at install) fails here."""
    if os.environ.get("UNIRADIX_REQUIRE_NATIVE", "") in ("", "0"):
        pytest.skip("UNIRADIX_REQUIRE_NATIVE is not set")
    assert native.BUILT, "uniradix._native did not build: is a C compiler installed?"
    assert native.HAVE_NATIVE or native.DISABLED
    assert native.sha256_implementation() in ("sha_ni", "portable")


@pytest.mark.parametrize(("value", "on"), [("1", False), ("0", True), ("", True)])
def test_environment_switches_the_native_paths_off(value: str, on: bool) -> None:
    env = {**os.environ, "UNIRADIX_NO_NATIVE": value}
    code = "from uniradix import native; print(native.HAVE_NATIVE)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(on and native.BUILT)


def test_without_the_module_the_wrappers_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_module", None)
    with pytest.raises(RuntimeError, match="not built"):
        native.chain_digests(b"", 1, None, False)


@needs_native
@pytest.mark.parametrize("portable", [False, True])
def test_sha256_equals_hashlib(portable: bool) -> None:
    rng = np.random.default_rng(3)
    # Every length around the padding boundaries (55: one block; 56: two) and a few long.
    lengths = [*range(0, 200), 247, 248, 1000, 4096, 65537]
    for length in lengths:
        data = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
        assert native.sha256(data, portable) == hashlib.sha256(data).digest(), length


def _python_chain(
    monkeypatch: pytest.MonkeyPatch, units: bytes, page_size: int, prior: bytes | None, bigram: bool
) -> bytes:
    with monkeypatch.context() as patch:
        patch.setattr(native, "HAVE_NATIVE", False)
        return page_hash.chain_digests(units, page_size, prior, bigram)


def _random_units(rng: np.random.Generator, num_units: int, wide: bool) -> bytes:
    tokens = rng.integers(0, 200_000, num_units)
    if wide and num_units:  # a few units outside uint32: their pages take the wide form
        where = rng.integers(0, num_units, max(1, num_units // 50))
        tokens[where] = rng.choice([-1, -(1 << 40), 1 << 32, (1 << 62) + 5], len(where))
    return RadixKey(tokens).units


@needs_native
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("seeded", [False, True])
@pytest.mark.parametrize("wide", [False, True])
def test_native_chain_equals_the_python_chain(
    monkeypatch: pytest.MonkeyPatch, page_size: int, seeded: bool, wide: bool
) -> None:
    rng = np.random.default_rng(page_size * 4 + seeded * 2 + wide)
    prior = page_hash.salt_seed("tenant-7") if seeded else None
    for num_units in (0, page_size - 1, page_size, 5 * page_size + 3, 2000):
        units = _random_units(rng, num_units, wide)
        want = _python_chain(monkeypatch, units, page_size, prior, False)
        got = native.chain_digests(units, page_size, prior, False)
        assert got == want, (page_size, num_units)
        assert len(got) == num_units // page_size * page_hash.DIGEST_BYTES


@needs_native
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_native_bigram_chain_equals_the_python_chain(
    monkeypatch: pytest.MonkeyPatch, page_size: int
) -> None:
    rng = np.random.default_rng(page_size)
    key = RadixKey(rng.integers(0, 1 << 32, 3 * page_size + 2), is_bigram=True)
    prior = page_hash.namespace_seed("lora-a", "salt")
    for seed in (None, prior):
        want = _python_chain(monkeypatch, key.units, page_size, seed, True)
        assert native.chain_digests(key.units, page_size, seed, True) == want


@needs_native
def test_native_chain_rejects_what_python_rejects() -> None:
    with pytest.raises(ValueError, match="page_size must be >= 1, got 0"):
        native.chain_digests(b"\0" * 8, 0, None, False)
    with pytest.raises(ValueError, match="32 bytes, got 3"):
        native.chain_digests(b"\0" * 8, 1, b"abc", False)
    # The compiled function checks on its own too (a caller may skip the wrapper).
    module = native._get()
    with pytest.raises(ValueError, match="page_size must be >= 1, got -4"):
        module.chain_digests(b"\0" * 8, -4, None, False)
    with pytest.raises(ValueError, match="32 bytes, got 31"):
        module.chain_digests(b"\0" * 8, 1, bytes(31), False)
    # A trailing partial unit is ignored, as `len(units) // 8` does in Python.
    assert module.chain_digests(b"\0" * 12, 1, None, False) == hashlib.sha256(bytes(4)).digest()


@needs_native
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize(("lora", "salt"), [(None, None), ("lora-a", None), ("lora-b", "s1")])
def test_native_vllm_cbor_chain_equals_the_python_chain(
    monkeypatch: pytest.MonkeyPatch, page_size: int, lora: str | None, salt: str | None
) -> None:
    hasher = VllmCborHasher(salt)
    rng = np.random.default_rng(page_size)
    widths = [0, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1]
    tokens = rng.permutation(np.concatenate((widths, rng.integers(0, 200_000, 4 * page_size))))
    units = RadixKey(tokens).units
    prior = vllm_none_hash("1234")
    for at_root in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(native, "HAVE_NATIVE", False)
            want = hasher(units, page_size, prior, lora, at_root)
        assert hasher(units, page_size, prior, lora, at_root) == want
        assert len(want) == len(tokens) // page_size * page_hash.DIGEST_BYTES
    with pytest.raises(ValueError, match="prior digest must be 32 bytes, got 2"):
        native.cbor_chain_digests(units, page_size, b"ab", (b"", b"", b"", b""))


@needs_native
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("bigram", [False, True])
def test_native_chain_of_many_nodes_equals_one_call_per_node(page_size: int, bigram: bool) -> None:
    rng = np.random.default_rng(page_size + bigram)
    seed = page_hash.salt_seed("tenant-3")
    # A tree's worth of nodes, each chained from the root (None), a seed, a digest, or an
    # earlier node (including one with no whole page, which passes its prior on).
    units: list[bytes] = []
    priors: list[bytes | int | None] = []
    want: list[bytes] = []
    for i in range(60):
        num_units = int(rng.integers(0, 6)) * page_size + int(rng.integers(0, page_size))
        key = (
            RadixKey(rng.integers(0, 1 << 32, num_units), is_bigram=True).units
            if bigram
            else _random_units(rng, num_units, wide=i % 3 == 0)
        )
        kind = int(rng.integers(0, 4)) if i else 0
        if kind == 0:
            prior: bytes | int | None = None
        elif kind == 1:
            prior = seed
        elif kind == 2:
            prior = rng.bytes(page_hash.DIGEST_BYTES)
        else:
            prior = int(rng.integers(0, i))
        if isinstance(prior, int):
            last, j = want[prior], prior
            while not last:  # an empty node chains on from its own prior
                before = priors[j]
                if not isinstance(before, int):
                    break
                last, j = want[before], before
            start = last[-page_hash.DIGEST_BYTES :] if last else priors[j]
            assert not isinstance(start, int)
        else:
            start = prior
        want.append(native.chain_digests(key, page_size, start, bigram))
        units.append(key)
        priors.append(prior)
    assert native.chain_digests_many(units, priors, page_size, bigram) == want
    assert native.chain_digests_many([], [], page_size, bigram) == []


@needs_native
def test_native_chain_of_many_nodes_rejects_bad_input() -> None:
    module = native._get()
    key = bytes(16)
    with pytest.raises(ValueError, match="page_size must be >= 1, got 0"):
        module.chain_digests_many([key], [None], 0, False)
    with pytest.raises(ValueError, match="1 priors for 2 nodes"):
        module.chain_digests_many([key, key], [None], 1, False)
    with pytest.raises(ValueError, match=r"priors\[1\] must be None, a 32-byte digest or an"):
        module.chain_digests_many([key, key], [None, 1], 1, False)  # not an earlier node
    with pytest.raises(ValueError, match=r"priors\[0\] must be"):
        module.chain_digests_many([key], [bytes(31)], 1, False)
    with pytest.raises(ValueError, match=r"priors\[0\] must be"):
        module.chain_digests_many([key], [-1], 1, False)
    with pytest.raises(TypeError, match=r"units\[0\] must be bytes"):
        module.chain_digests_many([bytearray(key)], [None], 1, False)
    with pytest.raises(TypeError):
        module.chain_digests_many((key,), [None], 1, False)  # lists only
