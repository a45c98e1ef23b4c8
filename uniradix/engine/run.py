"""`uniradix generate` as a library call: prompts in, generation (optionally verified) out.

Prompts come from a JSONL file (one list of token ids per line) or are generated: every prompt
starts with the same `shared_prefix_len` tokens; each odd-numbered prompt also repeats the
first half of the previous prompt's own part, so the tree branches at two depths::

    prompt 0:  [shared prefix][a a a a b b b b]
    prompt 1:  [shared prefix][a a a a c c c c]
    prompt 2:  [shared prefix][d d d d e e e e]
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from uniradix.config import Host, Nested, Pools
from uniradix.engine.engine import Engine, EngineConfig, verify
from uniradix.engine.model import ModelConfig, TinyHybridModel
from uniradix.sim.scheduler_config import SchedulerConfig

CONFIG_PATTERNS = {"full": "FF", "swa": "FSFS", "mamba": "FMFM", "hybrid": "FSMFSM"}
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class GenerateOptions(Nested):
    """`uniradix generate`: the prompts, the tiny model (`config` names its layer pattern,
    `pools.sliding_window` its window, `pools.device` its device) and the engine's groups."""

    config: str = "hybrid"
    prompts: str | None = None
    num_prompts: int = 8
    prompt_len: int = 32
    shared_prefix_len: int = 16
    seed: int = 0
    max_new_tokens: int = 8
    dtype: str = "float64"
    verify: bool = False
    pools: Pools = field(default_factory=lambda: Pools(full_tokens=1024, sliding_window=8))
    scheduler: SchedulerConfig = field(
        default_factory=lambda: SchedulerConfig(max_running=8, chunk_size=16)
    )
    host: Host = field(default_factory=Host)


def generated_prompts(
    num_prompts: int, prompt_len: int, shared_prefix_len: int, vocab_size: int, seed: int
) -> list[list[int]]:
    """Seeded prompts sharing prefixes as the module docstring shows."""
    if num_prompts < 1 or not 0 <= shared_prefix_len < prompt_len:
        raise ValueError(
            f"need num_prompts >= 1 and 0 <= shared_prefix_len < prompt_len, got "
            f"{num_prompts}, {shared_prefix_len}, {prompt_len}"
        )
    rng = random.Random(seed)

    def draw(n: int) -> list[int]:
        return [rng.randrange(vocab_size) for _ in range(n)]

    shared, own_len = draw(shared_prefix_len), prompt_len - shared_prefix_len
    prompts: list[list[int]] = []
    for i in range(num_prompts):
        if i % 2:
            head = prompts[-1][shared_prefix_len : shared_prefix_len + own_len // 2]
            prompts.append(shared + head + draw(own_len - len(head)))
        else:
            prompts.append(shared + draw(own_len))
    return prompts


def load_prompts(path: str) -> list[list[int]]:
    """One JSON list of token ids per non-empty line."""
    prompts = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        ids = json.loads(line)
        if not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids
        ):
            raise ValueError(f"{path}:{number}: expected a JSON list of token ids")
        prompts.append(ids)
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def run_generate(options: GenerateOptions) -> dict[str, Any]:
    """Generates for `options`' prompts; with `verify`, also without the cache. Returns the
    summary `uniradix generate --json` prints."""
    if options.config not in CONFIG_PATTERNS:
        raise ValueError(
            f"unknown config {options.config!r}; choose from {sorted(CONFIG_PATTERNS)}"
        )
    if options.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {options.dtype!r}; choose from {sorted(DTYPES)}")
    window = options.pools.sliding_window
    if window is None:
        raise ValueError("sliding_window=None: the tiny model needs a window (tokens)")
    model_config = ModelConfig(
        layer_pattern=CONFIG_PATTERNS[options.config],
        sliding_window=window,
        dtype=DTYPES[options.dtype],
    )
    model = TinyHybridModel(model_config, options.pools.device)
    prompts = (
        load_prompts(options.prompts)
        if options.prompts is not None
        else generated_prompts(
            options.num_prompts,
            options.prompt_len,
            options.shared_prefix_len,
            model_config.vocab_size,
            options.seed,
        )
    )
    longest = max(len(p) for p in prompts) + options.max_new_tokens
    ps = options.pools.page_size
    engine = Engine(
        model,
        EngineConfig(
            max_context_len=-(-longest // ps) * ps,
            pools=options.pools,
            scheduler=options.scheduler,
            host=options.host,
        ),
    )
    result = engine.generate(prompts, options.max_new_tokens)
    summary: dict[str, Any] = {
        "config": options.config,
        "layer_pattern": model_config.layer_pattern,
        "device": options.pools.device,
        "dtype": options.dtype,
        "page_size": ps,
        "chunk_size": options.scheduler.chunk_size,
        "num_prompts": len(prompts),
        "prompts": prompts,
        "generated_tokens": result.tokens,
        "prompt_tokens": result.prompt_tokens,
        "hit_tokens": result.hit_tokens,
        "hit_rate": result.hit_tokens / max(result.prompt_tokens, 1),
        "host_hit_tokens": result.host_hit_tokens,
        "evicted_tokens": result.evicted_tokens,
        "retractions": result.retractions,
        "recomputed_tokens": result.recomputed_tokens,
        "swa_tombstones": result.swa_tombstones,
        "mamba_tombstones": result.mamba_tombstones,
        "swa_freed_out_of_window": result.swa_freed_out_of_window,
        "leaked": result.leaked,
        "steps": result.steps,
        "wall_s": result.wall_s,
        "verified": options.verify,
        "mismatches": None,
        "mismatched_prompts": None,
        "max_abs_logit_diff": None,
    }
    if options.verify:
        t0 = time.perf_counter()
        check = verify(model, prompts, result)
        summary.update(
            mismatches=len(check.mismatches),
            mismatched_prompts=check.mismatches,
            max_abs_logit_diff=check.max_abs_logit_diff,
            verify_wall_s=time.perf_counter() - t0,
        )
    return summary


def text_summary(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['config']} ({summary['layer_pattern']}), page {summary['page_size']}, "
        f"chunk {summary['chunk_size']}, {summary['num_prompts']} prompts, "
        f"{summary['wall_s']:.2f} s",
        f"hit tokens: {summary['hit_tokens']} of {summary['prompt_tokens']} "
        f"({summary['hit_rate']:.1%}); retractions: {summary['retractions']}",
        f"evicted: {summary['evicted_tokens']}; peak tombstones: SWA "
        f"{summary['swa_tombstones']}, Mamba {summary['mamba_tombstones']}",
        f"leaked: {summary['leaked']}",
    ]
    if summary["verified"]:
        lines.append(
            f"verify: {summary['mismatches']} mismatched prompts, max |logit diff| "
            f"{summary['max_abs_logit_diff']:.3g}"
        )
    lines += [f"  {i}: {tokens}" for i, tokens in enumerate(summary["generated_tokens"])]
    return "\n".join(lines)
