"""Types of the compiled module built from `uniradix/csrc/` (see `uniradix.native`)."""

from typing_extensions import Buffer

def chain_digests(units: Buffer, page_size: int, prior: Buffer | None, bigram: bool) -> bytes: ...
def cbor_chain_digests(
    units: Buffer,
    page_size: int,
    prior: Buffer,
    lead: Buffer,
    array_head: Buffer,
    first_tail: Buffer,
    tail: Buffer,
) -> bytes: ...
def sha256(data: Buffer, portable: bool) -> bytes: ...
def sha256_implementation() -> str: ...
def copy_row_runs(
    pairs: list[tuple[Buffer, Buffer]], runs: Buffer, streaming: int = -1
) -> None: ...
def free_slots(
    slots: Buffer, page_size: int, in_use: Buffer, stack: Buffer, top: int, node_value: bool
) -> int: ...
