"""HostAux: the auxiliary host copies (SWA window, Mamba state) `insert_host` gives the new
host-only leaf at the end of the range it inserts (`uniradix.tiers.host_insert`)."""

from __future__ import annotations

from dataclasses import dataclass

from uniradix.types import Slots


@dataclass
class HostAux:
    """Auxiliary host copies for `insert_host`'s range end (each allocated from its host
    pool; the tier owns them from the call on)."""

    swa: Slots | None = None  # host SWA slots of the range's last tokens (whole pages)
    mamba: Slots | None = None  # one host state slot: the state at the range's end
