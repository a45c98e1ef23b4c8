"""Lock receipts: a release must name the node its acquire returned."""

from __future__ import annotations

from typing import Any


class LockReceiptError(ValueError, RuntimeError):
    """A lock released with another node's receipt: bad input, and the protocol violation
    SGLang's conformance kit expects its cores to report (as an assertion or RuntimeError)."""


def check_receipt(node_id: int, params: Any) -> None:
    if params.node_id != node_id:
        raise LockReceiptError(
            f"lock receipt anchored on node {params.node_id} released on node {node_id}"
        )
