import struct

import pytest

from uniradix.key import RadixKey
from uniradix.storage import KeySpace, Miss, MissReason
from uniradix.storage.page_format import FORMAT_VERSION, HEADER_BYTES, decode, encode

KS = KeySpace("m@1", "bfloat16", "layer_first", 4, "full")
KEY, OTHER = KS.keys_for(RadixKey(list(range(8))))
PAYLOAD = bytes(range(256)) * 40


def reason(result: object) -> MissReason:
    assert isinstance(result, Miss)
    return result.reason


def test_round_trip_without_copy() -> None:
    blob = encode(KEY, PAYLOAD)
    assert len(blob) == HEADER_BYTES + len(PAYLOAD) and HEADER_BYTES == 72
    page = decode(KEY, blob, expected_bytes=len(PAYLOAD))
    assert isinstance(page, memoryview) and page.obj is blob and bytes(page) == PAYLOAD


def test_every_single_bit_flip_is_a_miss() -> None:
    blob = bytearray(encode(KEY, PAYLOAD[:64]))
    for bit in range(len(blob) * 8):
        blob[bit // 8] ^= 1 << (bit % 8)
        assert isinstance(decode(KEY, blob), Miss), bit
        blob[bit // 8] ^= 1 << (bit % 8)
    assert isinstance(decode(KEY, blob), memoryview)


def test_each_bad_field_names_its_reason() -> None:
    blob = encode(KEY, PAYLOAD)
    assert reason(decode(KEY, blob[: HEADER_BYTES - 1])) is MissReason.SHORT
    assert reason(decode(KEY, b"XXXX" + blob[4:])) is MissReason.BAD_MAGIC
    stale = blob[:4] + struct.pack("<H", FORMAT_VERSION + 1) + blob[6:]
    assert reason(decode(KEY, stale)) is MissReason.BAD_VERSION
    assert reason(decode(KEY, blob[:6] + b"\x01\x00" + blob[8:])) is MissReason.BAD_FLAGS
    assert reason(decode(OTHER, blob)) is MissReason.BAD_DIGEST
    other_model = KeySpace("m@2", "bfloat16", "layer_first", 4, "full").same_pages([KEY])[0]
    assert reason(decode(other_model, blob)) is MissReason.BAD_FINGERPRINT
    assert reason(decode(KEY, blob[:-1])) is MissReason.BAD_LENGTH  # truncated
    assert reason(decode(KEY, blob + b"\x00")) is MissReason.BAD_LENGTH  # too long
    assert reason(decode(KEY, blob, expected_bytes=len(PAYLOAD) * 2)) is MissReason.BAD_LENGTH
    flipped = bytearray(blob)
    flipped[-1] ^= 0x10
    assert reason(decode(KEY, flipped)) is MissReason.BAD_CHECKSUM


def test_empty_payload_round_trips() -> None:
    assert bytes(decode(KEY, encode(KEY, b""))) == b""  # type: ignore[arg-type]


def test_memoryview_of_numpy_payload() -> None:
    np = pytest.importorskip("numpy")
    arr = np.arange(1000, dtype=np.float32)
    page = decode(KEY, encode(KEY, memoryview(arr)))
    assert isinstance(page, memoryview) and bytes(page) == arr.tobytes()
