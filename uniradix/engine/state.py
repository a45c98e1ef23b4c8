"""RequestState: where the model keeps one request's KV and recurrent states between calls.

The model (`TinyHybridModel`) is stateless; everything a request carries from one forward to
the next goes through this protocol, so the same model runs on a plain in-memory store (the
no-cache reference, `DenseRequestState`) and on uniradix's pools (full KV in a `KVPool` row
indexed by the request's `req_to_token` slots, SWA KV through the full->SWA slot mapping,
Mamba states in the request's Mamba slot).

Layer ids are the model's global layer indices (`ModelConfig.full_layer_ids` etc. list which
are which); a pool-backed store maps them to its pool-local layer numbers.

Tensor shapes (`H_kv = num_kv_heads`, `d = head_dim`, `D = mamba_inner_size`):
- K and V: `[num_positions, H_kv, d]`, in the model's dtype and device. K already has RoPE
  applied at its absolute position, so a stored K never depends on later tokens.
- Mamba `conv_state`: `[D, d_conv - 1]` (the last `d_conv - 1` conv inputs, oldest first);
  `ssm_state`: `[D, d_state]`.

Contracts, for a forward of `n` new tokens at positions `[s, s + n)`:

    positions   0 ........ s-W+1 ........ s ............ s+n
    full        |<---------- read [0, s+n) ---------------->|
    SWA                     |<--- read [s-W+1, s+n) ------->|   (start clamped at 0)
    written                               |<-- [s, s+n) --->|   (written before the read)

1. Write before read. In every attention layer the model first writes the new positions
   `[s, s + n)`, then reads a range ending at `s + n`; the read must return exactly what was
   written (the new K/V) plus what earlier calls wrote at positions `< s`. Positions are always
   a contiguous ascending `LongTensor` `s, s+1, ..., s+n-1` on the model's device.
2. Full layers read every position `[0, s + n)`.
3. SWA layers read only `[max(0, s - W + 1), s + n)`: the query at position `p` attends
   `max(0, p - W + 1) .. p`. So before a forward starting at `s`, SWA K/V at positions
   `< s - W + 1` will never be read again by this request and may be freed (tombstoned).
4. A Mamba state means "the state after processing positions `[0, s)`". At `s > 0` the model
   reads it once per layer at the start of the call and writes the state after `[0, s + n)`
   once at the end. At `s == 0` the model does NOT read: it starts from zeros, so a freshly
   allocated Mamba slot need not be cleared. Resuming a cached prefix of length `s` therefore
   needs the state of exactly that prefix in the slot (copy-on-write from the tree).
5. The model never mutates a tensor returned by a read, and it hands writes fresh tensors that
   the store may keep without copying.
"""

from __future__ import annotations

from typing import Protocol

import torch


class RequestState(Protocol):
    def write_full_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Stores K/V `[n, H_kv, d]` of full-attention layer `layer_id` at `positions`."""
        ...

    def read_full_kv(self, layer_id: int, end_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V `[end_pos, H_kv, d]` of positions `[0, end_pos)`, all previously written."""
        ...

    def write_swa_kv(
        self, layer_id: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Stores K/V `[n, H_kv, d]` of sliding-window layer `layer_id` at `positions`."""
        ...

    def read_swa_kv(
        self, layer_id: int, start_pos: int, end_pos: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V `[end_pos - start_pos, H_kv, d]` of positions `[start_pos, end_pos)`."""
        ...

    def read_mamba_state(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`(conv_state, ssm_state)` after the tokens processed so far (contract 4)."""
        ...

    def write_mamba_state(
        self, layer_id: int, conv_state: torch.Tensor, ssm_state: torch.Tensor
    ) -> None:
        """Replaces the layer's state with the one after the tokens just processed."""
        ...
