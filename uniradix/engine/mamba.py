"""Mamba-style mixer of the tiny model: causal depthwise conv + selective state-space scan.

A real recurrence in the Mamba-1 form, per channel `c` and state index `s`:

    u_t  = silu(conv(x)_t)                 causal depthwise conv of width d_conv
    dt_t = softplus(W_dt (W_x u_t)[:R] + dt_bias)          input-dependent step
    B_t, C_t = (W_x u_t)[R:R+S], (W_x u_t)[R+S:]           input-dependent B and C
    h_t  = exp(dt_t * A) * h_{t-1} + dt_t * B_t * u_t      A = -exp(A_log) < 0
    y_t  = (C_t . h_t + D * u_t) * silu(z_t)

Its whole memory of the past is `(conv_state, ssm_state)`: the last `d_conv - 1` conv inputs
and `h`. Running a sequence in one call or in chunks, carrying that state between them, gives
the same outputs, which is what lets a prefix cache store the state of a prefix and resume it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MambaMixer(nn.Module):
    def __init__(
        self, hidden_size: int, inner_size: int, d_state: int, d_conv: int, dt_rank: int
    ) -> None:
        super().__init__()
        self.inner_size = inner_size
        self.d_state = d_state
        self.d_conv = d_conv
        self.dt_rank = dt_rank
        self.in_weight = nn.Parameter(torch.empty(2 * inner_size, hidden_size))
        self.conv_weight = nn.Parameter(torch.empty(inner_size, d_conv))
        self.conv_bias = nn.Parameter(torch.empty(inner_size))
        self.x_weight = nn.Parameter(torch.empty(dt_rank + 2 * d_state, inner_size))
        self.dt_weight = nn.Parameter(torch.empty(inner_size, dt_rank))
        self.dt_bias = nn.Parameter(torch.empty(inner_size))
        self.A_log = nn.Parameter(torch.empty(inner_size, d_state))
        self.D = nn.Parameter(torch.empty(inner_size))
        self.out_weight = nn.Parameter(torch.empty(hidden_size, inner_size))

    def forward(
        self, x: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Runs `n` tokens of `b` requests: `x` `[b, n, hidden]`, states `[b, D, ...]`.

        Returns `(y [b, n, hidden], conv_state, ssm_state)`, the states after the `n` tokens.
        The inputs are not modified.
        """
        n = x.shape[1]
        xi, z = (x @ self.in_weight.T).chunk(2, dim=-1)
        # conv_state holds inputs oldest first, so prepending it makes the conv causal.
        extended = torch.cat([conv_state.transpose(1, 2), xi], dim=1)
        conv = self.conv_bias.expand_as(xi)
        for tap in range(self.d_conv):
            conv = conv + extended[:, tap : tap + n, :] * self.conv_weight[:, tap]
        new_conv_state = extended[:, extended.shape[1] - (self.d_conv - 1) :, :].transpose(1, 2)
        u = F.silu(conv)
        proj = u @ self.x_weight.T
        r, s = self.dt_rank, self.d_state
        dt_in, b_in, c_in = proj[..., :r], proj[..., r : r + s], proj[..., r + s :]
        dt = F.softplus(dt_in @ self.dt_weight.T + self.dt_bias)
        a = -torch.exp(self.A_log)
        h = ssm_state
        ys = []
        for t in range(n):
            dt_t = dt[:, t, :, None]
            h = torch.exp(dt_t * a) * h + dt_t * b_in[:, t, None, :] * u[:, t, :, None]
            ys.append((h * c_in[:, t, None, :]).sum(dim=-1) + self.D * u[:, t])
        y = torch.stack(ys, dim=1) * F.silu(z)
        return y @ self.out_weight.T, new_conv_state.contiguous(), h
