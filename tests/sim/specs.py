"""Hand-built request lists for the sim tests."""

from __future__ import annotations

import numpy as np

from uniradix.sim.request_spec import RequestSpec, TokenPrompt


def spec(rid: int, prompt: list[int], outputs: list[int], after: int | None = None) -> RequestSpec:
    return RequestSpec(rid, TokenPrompt(prompt), np.array(outputs, dtype=np.int64), rid, after)


def specs_from(prompts: list[list[int]], outputs: list[list[int]]) -> list[RequestSpec]:
    return [spec(i, p, o) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
