"""`uniradix plan`, and the budget flags `uniradix replay` takes: argument parsing and
printing only; the work is in `uniradix.plan.sweep` and `uniradix.plan.budget`.

`--model NAME` (a preset) or `--model-config FILE` (a Hugging Face config.json) gives the
bytes per pool unit; `--gpu-cache` the budget; `--split auto` (default) searches the split,
`--split full=0.6,mamba=0.4` fixes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from uniradix.cli_flags import byte_size, byte_sizes, fail, int_at_least
from uniradix.cli_groups import Flag, add_flags, options_from_args
from uniradix.plan.budget import (
    PoolSizes,
    Split,
    annotate_components,
    size_host_pools,
    size_pools,
)
from uniradix.plan.models import ModelSpec, load_hf_config
from uniradix.plan.presets import PRESET_CONFIGS, preset
from uniradix.plan.sweep import GRID_STEP, REFINE_ROUNDS, run_plan
from uniradix.sim.replay import ReplayOptions, aux_device_sizes


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value <= 0.5:
        raise argparse.ArgumentTypeError(f"must be in (0, 0.5], got {text}")
    return value


def _model_flags(p: argparse._ActionsContainer, required: bool) -> None:
    group = p.add_mutually_exclusive_group(required=required)
    group.add_argument("--model", choices=sorted(PRESET_CONFIGS), help="a preset model shape")
    group.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json")
    p.add_argument(
        "--split",
        default="auto",
        help="auto (search the best) or POOL=FRACTION,... over the model's pools "
        "(full, swa, mamba), e.g. full=0.7,mamba=0.3 (default auto)",
    )


def add_budget_flags(p: argparse._ActionsContainer) -> None:
    """The flags `uniradix replay` takes to size its pools from a model and a budget."""
    _model_flags(p, required=False)
    p.add_argument(
        "--gpu-cache",
        type=byte_size,
        metavar="SIZE",
        help="device memory for the cache (40GB, 24GiB); replaces --full-tokens, "
        "--swa-tokens and --mamba-slots; needs --model or --model-config",
    )
    p.add_argument(
        "--host-cache",
        type=byte_size,
        metavar="SIZE",
        help="host memory for the L2 tier (200GB): its full-KV, SWA and Mamba host pools "
        "together; replaces --host-tokens; needs --model or --model-config",
    )


def model_of(args: argparse.Namespace) -> ModelSpec | None:
    if args.model is not None:
        return preset(args.model)
    if args.model_config is not None:
        return load_hf_config(args.model_config)
    return None


def budget_options(
    args: argparse.Namespace, options: ReplayOptions
) -> tuple[ReplayOptions, PoolSizes | None]:
    """`options` resized by replay's budget flags (model shape, pools from --gpu-cache);
    ValueError naming the flag for a bad combination."""
    model = model_of(args)
    if model is None:
        for flag, value in (("--gpu-cache", args.gpu_cache), ("--host-cache", args.host_cache)):
            if value is not None:
                raise ValueError(f"{flag} needs --model or --model-config")
        return options, None
    if args.host_cache is not None and options.host.enabled:
        raise ValueError("--host-cache replaces --host-tokens and --hicache-ratio: give one")
    if args.gpu_cache is None:
        options = options.updated(
            config=model.replay_config(),
            sliding_window=model.sliding_window or options.pools.sliding_window,
            model=model.compute_shape(),
        )
        if args.host_cache is not None:
            options = options.updated(host_tokens=host_tokens(model, args.host_cache, options))
        return options, None
    split = _split_or_search(args.split, model, options, args.gpu_cache)
    sizes = size_pools(model, args.gpu_cache, split, options.pools.page_size)
    if args.host_cache is not None:
        sizes = sizes.with_host(args.host_cache)
    return sizes.replay_options(options), sizes


def host_tokens(model: ModelSpec, host_bytes: int, options: ReplayOptions) -> int:
    """Full-KV host tokens a host budget buys beside the device pools `options` give (the
    SWA and Mamba host pools follow them and count in the budget: `size_host_pools`)."""
    swa, mamba = aux_device_sizes(options)
    device = {"full": options.pools.full_tokens, "swa": swa, "mamba": mamba}
    units = {p: device[p] for p in model.pools()}
    return size_host_pools(model, host_bytes, units, options.pools.page_size).units["full"]


def _split_or_search(text: str, model: ModelSpec, base: ReplayOptions, gpu_bytes: int) -> Split:
    if text != "auto":
        try:
            return Split.parse(text, model.pools())
        except ValueError as exc:
            raise ValueError(f"--split: {exc}") from None
    result = run_plan(base, model, [gpu_bytes], base.pools.page_size, progress=base.progress)
    best = result.best[-1]
    if best.hit_rate is None:
        raise ValueError(f"--gpu-cache: no split of {gpu_bytes} bytes can replay: {best.error}")
    split = Split.of(model.pools(), best.split)
    print(
        f"split auto: {len(result.points)} replays, best {split.label()} "
        f"(hit rate {best.hit_rate:.4f})",
        file=sys.stderr,
    )
    return split


def add_pool_bytes(summary: dict[str, Any], sizes: PoolSizes | None) -> None:
    if sizes is not None:
        annotate_components(summary, sizes)


def plan_flags() -> list[Flag]:
    """`uniradix plan`'s flags on the knobs of the replays it runs (one line adds one)."""
    from uniradix.sim.traces import TRACE_FORMATS
    from uniradix.sim.workloads import WORKLOADS

    at_least_1, at_least_0 = {"type": int_at_least(1)}, {"type": int_at_least(0)}
    return [
        Flag("--workload", "workload", "built-in workload", {"choices": sorted(WORKLOADS)}),
        Flag("--trace", "trace", "trace file (JSONL); overrides --workload"),
        Flag("--trace-format", "trace_format", "", {"choices": TRACE_FORMATS}),
        Flag("--max-requests", "max_requests", "replay only the first N requests", at_least_1),
        Flag("--seed", "seed", "seed of workloads and generated tokens", at_least_0),
        Flag("--page-size", "page_size", "tokens per page", at_least_1),
        Flag("--max-running", "max_running", "cap on running requests", at_least_1),
        Flag("--chunk-size", "chunk_size", "prefill tokens per step", at_least_1),
    ]


def add_plan_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "plan",
        help="the hit rate a memory budget buys, and the best split between pools",
        description="Replay a trace for each budget and split of the model's pools (one "
        "process per core) and report hit rate against memory, the best split per budget "
        "and the knee of the curve.",
    )
    add_flags(p, ReplayOptions(), plan_flags())
    budget = p.add_argument_group("memory budget")
    _model_flags(budget, required=True)
    budget.add_argument(
        "--gpu-cache",
        type=byte_sizes,
        required=True,
        metavar="SIZE[,SIZE...]",
        help="device memory budgets for the cache, e.g. 10GB,20GB,40GB",
    )
    budget.add_argument(
        "--host-cache",
        type=byte_size,
        metavar="SIZE",
        help="host memory of the L2 tier (its full-KV, SWA and Mamba host pools together), "
        "the same at every point",
    )
    search = p.add_argument_group("split search")
    search.add_argument(
        "--refine-rounds",
        type=int_at_least(0),
        default=REFINE_ROUNDS,
        help=f"rounds of the split search after the grid (default {REFINE_ROUNDS})",
    )
    search.add_argument("--workers", type=int_at_least(1), help="processes (default: one per core)")
    search.add_argument(
        "--grid-step",
        type=_share,
        default=GRID_STEP,
        help=f"share step of the coarse grid (default {GRID_STEP})",
    )
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print only the JSON result")
    out.add_argument("--report", metavar="DIR", help="write plan.json, plan.md, plan.png")
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run_plan_command(args: argparse.Namespace) -> int:
    from uniradix.plan.report import markdown_plan, write_plan_report

    prog = "uniradix plan"
    base = options_from_args(ReplayOptions(), args, plan_flags())
    try:
        model = model_of(args)
        assert model is not None  # the group is required
        splits = None if args.split == "auto" else [Split.parse(args.split, model.pools())]
        result = run_plan(
            base,
            model,
            args.gpu_cache,
            args.page_size,
            splits,
            args.grid_step,
            args.refine_rounds,
            args.workers,
            progress=not args.no_progress,
            host_bytes=args.host_cache,
        )
    except (ValueError, OSError) as exc:
        return fail(prog, str(exc))
    print(json.dumps(result.to_json()) if args.json else markdown_plan(result), end="\n")
    if args.report:
        try:
            paths = write_plan_report(result, args.report)
        except RuntimeError as exc:
            return fail(prog, str(exc))
        print(f"report: {', '.join(map(str, paths))}", file=sys.stderr)
    return 0 if result.best[-1].hit_rate is not None else 1
