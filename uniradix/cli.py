"""Command line entry point: thin argument parsing; the work lives in the library."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uniradix.sim.replay import ReplayOptions


def _replay_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from uniradix.eviction.aux_eviction import AUX_EVICTION_POLICIES
    from uniradix.eviction.swa_reuse import SWA_EVICTION_POLICIES
    from uniradix.sim.replay import CONFIG_COMPONENTS, ReplayOptions
    from uniradix.sim.traces import TRACE_FORMATS
    from uniradix.sim.workloads import WORKLOADS

    d = ReplayOptions()
    p = commands.add_parser(
        "replay",
        help="replay a workload or trace through the real cache",
        description="Drive the cache as a serving scheduler would and report hit rates, "
        "memory per pool and leaks. Exit status 1 on an invariant violation or a leak.",
    )
    p.add_argument("--workload", choices=sorted(WORKLOADS), default=d.workload)
    p.add_argument("--trace", help="trace file (JSONL); overrides --workload")
    p.add_argument("--trace-format", choices=TRACE_FORMATS, default=d.trace_format)
    p.add_argument("--config", choices=sorted(CONFIG_COMPONENTS), default=d.config)
    for flag, default, what in [
        ("--page-size", d.page_size, "tokens per page"),
        ("--full-tokens", d.full_tokens, "full-attention KV pool size (tokens)"),
        ("--swa-tokens", d.swa_tokens, "SWA KV pool size (tokens)"),
        ("--sliding-window", d.sliding_window, "SWA window (tokens)"),
        ("--mamba-slots", d.mamba_slots, "Mamba state slots"),
        ("--max-running", d.max_running, "cap on running requests"),
        ("--chunk-size", d.chunk_size, "prefill tokens per step"),
        ("--max-requests", d.max_requests, "replay only the first N requests"),
        ("--seed", d.seed, "seed of workloads and generated tokens"),
        ("--full-layers", d.model.full_layers, "model shape for the FLOPs estimate"),
        ("--swa-layers", d.model.swa_layers, "model shape for the FLOPs estimate"),
        ("--mamba-layers", d.model.mamba_layers, "model shape for the FLOPs estimate"),
        ("--hidden-size", d.model.hidden_size, "model shape for the FLOPs estimate"),
    ]:
        p.add_argument(flag, type=int, default=default, help=f"{what} (default {default})")
    p.add_argument("--decode-reserve-ratio", type=float, default=d.decode_reserve_ratio)
    host = p.add_mutually_exclusive_group()
    host.add_argument("--host-tokens", type=int, help="host tier (L2) size in tokens")
    host.add_argument("--hicache-ratio", type=float, help="host tier size / device pool size")
    p.add_argument(
        "--write-policy",
        choices=["write_through", "write_through_selective", "write_back"],
        default=d.write_policy,
        help="when device KV gets its host copy (with a host tier)",
    )
    p.add_argument("--check-invariants", action="store_true", help="after every step")
    p.add_argument(
        "--storage",
        dest="storage_url",
        metavar="URL",
        help="L3 store under the host tier: file://DIR[?max_bytes=10G], file (a temp dir), "
        "redis://[:PASSWORD@]HOST:PORT/DB, rediss://... (TLS), redis+cluster://HOST:PORT; "
        "a failing store prints one line on stderr and the replay goes on without it",
    )
    p.add_argument("--model-fingerprint", default=d.model_fingerprint, help="isolates L3 pages")
    p.add_argument(
        "--prefetch-policy",
        choices=["best_effort", "wait_complete", "timeout"],
        default=d.prefetch_policy,
        help="when an L3 prefetch stops (default wait_complete: reproducible figures)",
    )
    p.add_argument("--sessions", action="store_true", help="session cache: keep turns' context")
    p.add_argument(
        "--checkpoint-placement",
        action=argparse.BooleanOptionalAction,
        default=d.checkpoint_placement,
        help="hybrid caches: keep SWA windows and Mamba states where requests branch",
    )
    p.add_argument(
        "--checkpoint-grid",
        type=int,
        default=d.checkpoint_grid,
        help=f"grid of branch positions for --checkpoint-placement (default {d.checkpoint_grid})",
    )
    p.add_argument(
        "--aux-eviction-policy",
        choices=AUX_EVICTION_POLICIES,
        default=d.aux_eviction_policy,
        help="eviction order of SWA windows and Mamba states",
    )
    p.add_argument(
        "--swa-eviction-policy",
        choices=SWA_EVICTION_POLICIES,
        default=d.swa_eviction_policy,
        help="eviction order of SWA windows (ignored with --aux-eviction-policy branch_aware)",
    )
    p.add_argument("--json", action="store_true", help="print only the JSON summary")
    p.add_argument("--report", metavar="DIR", help="write summary.json, summary.md, plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from uniradix.plan.command import add_budget_flags

    add_budget_flags(p)
    _cluster_arguments(p)


def _cluster_arguments(p: argparse.ArgumentParser) -> None:
    from uniradix.events.endpoints import BIND_MODES
    from uniradix.events.groups import COMPONENTS
    from uniradix.events.publisher import SENDERS
    from uniradix.events.wire import WIRE_SHAPES
    from uniradix.hashing.events import HASH_ALGOS
    from uniradix.sim.router import ROUTERS

    p.add_argument("--instances", type=int, default=1, help="instances behind a router")
    p.add_argument("--router", choices=ROUTERS, default="round-robin")
    p.add_argument("--kv-events", metavar="ENDPOINT", help="publish KV events (ZMQ PUB)")
    p.add_argument("--kv-events-replay", metavar="ENDPOINT", help="replay ROUTER endpoint")
    p.add_argument(
        "--kv-events-bind",
        choices=BIND_MODES,
        default="auto",
        help="auto: bind when ENDPOINT has '*' (vLLM/SGLang rule), else connect",
    )
    p.add_argument("--kv-events-snapshot", metavar="ENDPOINT", help="snapshot ROUTER endpoint")
    p.add_argument(
        "--kv-events-components",
        choices=COMPONENTS,
        default="auto",
        help="auto/all: SWA and Mamba groups too (vLLM hybrid fields); full: full only",
    )
    p.add_argument("--kv-events-wire", choices=WIRE_SHAPES, default="map")
    p.add_argument("--kv-events-topic", default="", help="e.g. kv@{pod}@{model} for llm-d")
    p.add_argument("--kv-events-hash-algo", choices=HASH_ALGOS, default="sglang_sha256")
    p.add_argument(
        "--kv-events-hash-seed", help="vLLM's PYTHONHASHSEED (needed by vllm_sha256_cbor)"
    )
    p.add_argument("--kv-events-sender", choices=SENDERS, default="thread")
    p.add_argument(
        "--kv-events-sender-wait-ms",
        type=int,
        default=20,
        help="the thread sender, once woken, waits this long and sends every batch queued by "
        "then (0: one wake-up per batch)",
    )


def _cluster(args: argparse.Namespace, options: ReplayOptions) -> int:
    import json

    from uniradix.events.endpoints import bind_flag
    from uniradix.events.publisher import KVEventsConfig
    from uniradix.sim.cluster import cluster_text, run_cluster

    kv_events = None
    if args.kv_events:
        kv_events = KVEventsConfig(
            endpoint=args.kv_events,
            replay_endpoint=args.kv_events_replay,
            bind=bind_flag(args.kv_events_bind),
            components=args.kv_events_components,
            snapshot_endpoint=args.kv_events_snapshot,
            wire=args.kv_events_wire,
            topic=args.kv_events_topic,
            model=args.config,
            hash_algo=args.kv_events_hash_algo,
            hash_seed=args.kv_events_hash_seed,
            sender=args.kv_events_sender,
            sender_wait_ms=args.kv_events_sender_wait_ms,
        )
    summary = run_cluster(options, args.instances, args.router, kv_events)
    print(json.dumps(summary) if args.json else cluster_text(summary))
    leaked = {i["name"]: n for i in summary["instances"] if (n := sum(i["leaked"].values()))}
    if leaked:
        print(f"uniradix replay: leaked slots per instance: {leaked}", file=sys.stderr)
        return 1
    return 0


def _replay(args: argparse.Namespace) -> int:
    from uniradix.cli_flags import fail, resource_failure
    from uniradix.errors import InvariantError
    from uniradix.plan.command import add_pool_bytes, budget_options
    from uniradix.sim.compute import ModelShape
    from uniradix.sim.replay import ReplayOptions, run_replay
    from uniradix.sim.report import markdown_summary, summary_json, write_report

    try:
        options = ReplayOptions(
            **{
                k: getattr(args, k)
                for k in ReplayOptions.__dataclass_fields__
                if k not in ("model", "progress", "storage_backend")
            },
            model=ModelShape(
                args.full_layers,
                args.swa_layers,
                args.mamba_layers,
                args.hidden_size,
                args.sliding_window,
            ),
            progress=not args.no_progress,
        )
        options, sizes = budget_options(args, options)
        if args.instances != 1 or args.router != "round-robin" or args.kv_events:
            return _cluster(args, options)
        result = run_replay(options)
        add_pool_bytes(result.summary, sizes)
    except InvariantError as exc:
        print(f"uniradix replay: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"uniradix replay: error: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:
        if (message := resource_failure(exc)) is None:
            raise
        return fail("uniradix replay", message)
    print(summary_json(result) if args.json else markdown_summary(result), end="\n")
    status = 0
    if args.report:
        try:
            paths = write_report(result, args.report)
            print(f"report: {', '.join(map(str, paths))}", file=sys.stderr)
        except RuntimeError as exc:
            print(f"uniradix replay: {exc}", file=sys.stderr)
            status = 1
    leaked = {pool: n for pool, n in result.summary["leaked"].items() if n}
    if leaked:
        print(f"uniradix replay: leaked slots per pool: {leaked}", file=sys.stderr)
        status = 1
    return status


def _generate_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from uniradix.engine.run import CONFIG_PATTERNS, DTYPES, GenerateOptions

    d = GenerateOptions()
    p = commands.add_parser(
        "generate",
        help="generate with the tiny reference model on the cache's pools",
        description="Greedy generation with the tiny hybrid model, its KV and states in the "
        "cache's pools. Exit status 1 when --verify finds a mismatch or a pool leaks.",
    )
    p.add_argument("--config", choices=sorted(CONFIG_PATTERNS), default=d.config)
    p.add_argument("--prompts", help="JSONL file, one list of token ids per line")
    for flag, default, what in [
        ("--num-prompts", d.num_prompts, "generated prompts"),
        ("--prompt-len", d.prompt_len, "tokens per generated prompt"),
        ("--shared-prefix-len", d.shared_prefix_len, "tokens all generated prompts share"),
        ("--seed", d.seed, "seed of the generated prompts"),
        ("--max-new-tokens", d.max_new_tokens, "tokens generated per prompt"),
        ("--full-tokens", d.full_tokens, "full-attention KV pool size (tokens)"),
        ("--swa-tokens", d.swa_tokens, "SWA KV pool size (tokens)"),
        ("--mamba-slots", d.mamba_slots, "Mamba state slots"),
        ("--page-size", d.page_size, "tokens per page"),
        ("--chunk-size", d.chunk_size, "prefill tokens per step"),
        ("--max-running", d.max_running, "cap on running requests"),
        ("--sliding-window", d.sliding_window, "SWA window of the model (tokens)"),
    ]:
        p.add_argument(flag, type=int, default=default, help=f"{what} (default {default})")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=d.dtype)
    p.add_argument("--device", default=d.device)
    p.add_argument("--host-tokens", type=int, help="host tier (L2) size in full-KV tokens")
    p.add_argument(
        "--write-policy",
        choices=["write_through", "write_through_selective", "write_back"],
        default=d.write_policy,
    )
    p.add_argument("--host-layout", choices=["layer_first", "page_first"], default=d.host_layout)
    p.add_argument("--host-engine", choices=["sync", "thread", "cuda"], default=d.host_engine)
    p.add_argument("--verify", action="store_true", help="also run without the cache, compare")
    p.add_argument("--check-invariants", action="store_true", help="after every step")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _generate(args: argparse.Namespace) -> int:
    import json

    import torch

    from uniradix.cli_flags import fail, resource_failure
    from uniradix.engine.run import GenerateOptions, run_generate, text_summary
    from uniradix.errors import InvariantError

    options = GenerateOptions(**{k: getattr(args, k) for k in GenerateOptions.__dataclass_fields__})
    # The tiny model's tensors are too small for intra-op threads: on a busy machine their
    # barrier waits made a run 200x slower.
    torch.set_num_threads(1)
    try:
        summary = run_generate(options)
    except InvariantError as exc:
        print(f"uniradix generate: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"uniradix generate: error: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:
        if (message := resource_failure(exc)) is None:
            raise
        return fail("uniradix generate", message)
    print(json.dumps(summary) if args.json else text_summary(summary))
    status = 0
    leaked = {pool: n for pool, n in summary["leaked"].items() if n}
    if leaked:
        print(f"uniradix generate: leaked slots per pool: {leaked}", file=sys.stderr)
        status = 1
    if summary["mismatches"]:
        print(
            f"uniradix generate: prompts {summary['mismatched_prompts']} differ from the "
            "no-cache run",
            file=sys.stderr,
        )
        status = 1
    return status


def _events_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from uniradix.events.endpoints import BIND_MODES

    p = commands.add_parser(
        "events",
        help="print a live KV event stream, decoded",
        description="Subscribe to a KV event publisher (vLLM, SGLang or uniradix) and print "
        "each batch as one JSON line, whatever its wire shape.",
    )
    p.add_argument("--listen", metavar="ENDPOINT", required=True, help="e.g. tcp://host:5557")
    p.add_argument("--topic", default="", help="topic prefix to subscribe to")
    p.add_argument("--count", type=int, help="stop after N batches")
    p.add_argument("--timeout", type=float, help="stop after N seconds without a batch")
    p.add_argument(
        "--bind",
        nargs="?",
        const="bind",
        default="connect",
        choices=BIND_MODES,
        help="bind ENDPOINT (publishers connect to it); auto: bind when it has '*'",
    )


def main(argv: Sequence[str] | None = None) -> int:
    from uniradix.cli_flags import OneLineParser, check_numbers

    parser = OneLineParser(prog="uniradix", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="a few requests sharing prefixes, narrated")
    _replay_parser(commands)
    _generate_parser(commands)
    _events_parser(commands)
    from uniradix.plan.command import add_plan_parser, run_plan_command

    add_plan_parser(commands)
    check_numbers(parser)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from uniradix.demo import run_demo

        run_demo()
        return 0
    if args.command == "generate":
        return _generate(args)
    if args.command == "events":
        from uniradix.events.endpoints import auto_binds
        from uniradix.events.listen import listen

        bind = auto_binds(args.listen) if args.bind == "auto" else args.bind == "bind"
        try:
            listen(args.listen, args.topic, args.count, args.timeout, bind=bind)
        except ValueError as exc:
            print(f"uniradix events: error: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "plan":
        return run_plan_command(args)
    return _replay(args)


def run() -> None:
    """The console entry point: `main`, where a reader that stopped reading (`uniradix
    replay | head`) ends the command quietly instead of with a traceback."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout once more at exit, which would fail again: send it nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status)


if __name__ == "__main__":
    run()
