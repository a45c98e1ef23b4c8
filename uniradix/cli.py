"""Command line entry point: thin argument parsing; the work lives in the library."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from uniradix.cli_generate import WRITE_POLICIES, add_generate_parser, run_generate_command
from uniradix.cli_groups import SCHEDULED_POOL_FLAGS, Flag, add_flags

if TYPE_CHECKING:
    from uniradix.sim.replay import ReplayOptions


def replay_flags() -> list[Flag]:
    """`uniradix replay`'s flags on `ReplayOptions` knobs (one line adds one)."""
    from uniradix.cli_flags import checked_name
    from uniradix.eviction.orders import (
        ORDER_NAMES,
        check_aux_eviction_policy,
        check_swa_eviction_policy,
    )
    from uniradix.sim.replay import CONFIG_COMPONENTS
    from uniradix.sim.traces import TRACE_FORMATS
    from uniradix.sim.workloads import WORKLOADS

    n, r = {"type": int}, {"type": float}
    on = {"action": "store_true"}
    return [
        Flag("--workload", "workload", "built-in workload", {"choices": sorted(WORKLOADS)}),
        Flag("--trace", "trace", "trace file (JSONL); overrides --workload"),
        Flag("--trace-format", "trace_format", "", {"choices": TRACE_FORMATS}),
        Flag("--config", "config", "", {"choices": sorted(CONFIG_COMPONENTS)}),
        Flag("--max-requests", "max_requests", "replay only the first N requests", n),
        Flag("--seed", "seed", "seed of workloads and generated tokens", n),
        Flag("--sessions", "sessions", "session cache: keep turns' context", on),
        *SCHEDULED_POOL_FLAGS,
        Flag("--sliding-window", "sliding_window", "SWA window (tokens)", n),
        Flag("--decode-reserve-ratio", "decode_reserve_ratio", "", r),
        Flag(
            "--checkpoint-placement",
            "checkpoint_placement",
            "hybrid caches: keep SWA windows and Mamba states where requests branch",
            {"action": argparse.BooleanOptionalAction},
        ),
        Flag("--checkpoint-grid", "checkpoint_grid", "branch positions' grid", n),
        Flag(
            "--aux-eviction-policy",
            "aux_eviction_policy",
            "eviction order of Mamba states (reuse_credit: no sign of reuse first, then credits)",
            {"choices": ORDER_NAMES, "type": checked_name(check_aux_eviction_policy)},
        ),
        Flag(
            "--swa-eviction-policy",
            "swa_eviction_policy",
            "eviction order of SWA windows (reuse_credit: no sign of reuse first, then credits)",
            {"choices": ORDER_NAMES, "type": checked_name(check_swa_eviction_policy)},
        ),
        Flag("--host-tokens", "host_tokens", "host tier (L2) size in tokens", n, True),
        Flag("--hicache-ratio", "hicache_ratio", "host tier size / device pool size", r, True),
        Flag(
            "--write-policy",
            "write_policy",
            "when device KV gets its host copy (with a host tier)",
            {"choices": WRITE_POLICIES},
        ),
        Flag(
            "--storage",
            "storage_url",
            "L3 store under the host tier: file://DIR[?max_bytes=10G], file (a temp dir), "
            "redis://[:PASSWORD@]HOST:PORT/DB, rediss://... (TLS), redis+cluster://HOST:PORT; "
            "a failing store prints one line on stderr and the replay goes on without it",
            {"metavar": "URL"},
        ),
        Flag("--model-fingerprint", "model_fingerprint", "isolates L3 pages"),
        Flag(
            "--prefetch-policy",
            "prefetch_policy",
            "when an L3 prefetch stops (wait_complete: reproducible figures)",
            {"choices": ["best_effort", "wait_complete", "timeout"]},
        ),
    ]


def _replay_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from uniradix.sim.replay import ReplayOptions

    d = ReplayOptions()
    p = commands.add_parser(
        "replay",
        help="replay a workload or trace through the real cache",
        description="Drive the cache as a serving scheduler would and report hit rates, "
        "memory per pool and leaks. Exit status 1 on an invariant violation or a leak.",
    )
    add_flags(p, d, replay_flags())
    shape = p.add_argument_group("model shape (for the FLOPs estimate)")
    for flag, default in [
        ("--full-layers", d.model.full_layers),
        ("--swa-layers", d.model.swa_layers),
        ("--mamba-layers", d.model.mamba_layers),
        ("--hidden-size", d.model.hidden_size),
    ]:
        shape.add_argument(flag, type=int, default=default, help=f"(default {default})")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print only the JSON summary")
    out.add_argument("--report", metavar="DIR", help="write summary.json, summary.md, plots")
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from uniradix.plan.command import add_budget_flags

    add_budget_flags(p.add_argument_group("memory budget (pools sized from a model)"))
    _cluster_arguments(p.add_argument_group("cluster and KV events"))


def kv_events_flags() -> list[Flag]:
    """The cluster replay's KV event flags, each on the `KVEventsConfig` field it sets (its
    own `add_argument` keywords: the CLI's defaults differ from the config's for `bind`)."""
    from uniradix.events.endpoints import BIND_MODES
    from uniradix.events.groups import COMPONENTS
    from uniradix.events.publisher import SENDERS
    from uniradix.events.wire import WIRE_SHAPES
    from uniradix.hashing.events import HASH_ALGOS

    endpoint = {"metavar": "ENDPOINT"}
    return [
        Flag("--kv-events", "endpoint", "publish KV events (ZMQ PUB)", endpoint),
        Flag("--kv-events-replay", "replay_endpoint", "replay ROUTER endpoint", endpoint),
        Flag(
            "--kv-events-bind",
            "bind",
            "auto: bind when ENDPOINT has '*' (vLLM/SGLang rule), else connect",
            {"choices": BIND_MODES, "default": "auto"},
        ),
        Flag("--kv-events-snapshot", "snapshot_endpoint", "snapshot ROUTER endpoint", endpoint),
        Flag(
            "--kv-events-components",
            "components",
            "auto/all: SWA and Mamba groups too (vLLM hybrid fields); full: full only",
            {"choices": COMPONENTS, "default": "auto"},
        ),
        Flag("--kv-events-wire", "wire", "", {"choices": WIRE_SHAPES, "default": "map"}),
        Flag("--kv-events-topic", "topic", "e.g. kv@{pod}@{model} for llm-d", {"default": ""}),
        Flag(
            "--kv-events-hash-algo",
            "hash_algo",
            "",
            {"choices": HASH_ALGOS, "default": "sglang_sha256"},
        ),
        Flag(
            "--kv-events-hash-seed",
            "hash_seed",
            "vLLM's PYTHONHASHSEED (needed by vllm_sha256_cbor)",
        ),
        Flag("--kv-events-sender", "sender", "", {"choices": SENDERS, "default": "thread"}),
        Flag(
            "--kv-events-sender-wait-ms",
            "sender_wait_ms",
            "the thread sender, once woken, waits this long and sends every batch queued by "
            "then (0: one wake-up per batch)",
            {"type": int, "default": 20},
        ),
    ]


def _flag_dest(flag: Flag) -> str:
    return flag.name.lstrip("-").replace("-", "_")


def _cluster_arguments(p: argparse._ActionsContainer) -> None:
    from uniradix.sim.router import ROUTERS

    p.add_argument("--instances", type=int, default=1, help="instances behind a router")
    p.add_argument("--router", choices=ROUTERS, default="round-robin")
    p.add_argument(
        "--dispatch",
        choices=("auto", "early", "late"),
        default="auto",
        help="route each request on arrival (early), or when an instance would admit it now "
        "(late binding); auto (default): late for cache-aware over 2+ instances, else early",
    )
    p.add_argument(
        "--await-turns",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hold a prompt holding the whole of one still being prefilled until that prefill "
        "is published (a Mooncake trace's next turn); default: with late binding",
    )
    for flag in kv_events_flags():
        p.add_argument(flag.name, help=flag.help or None, **flag.kwargs)


def _cluster(args: argparse.Namespace, options: ReplayOptions) -> int:
    import json

    from uniradix.cli_flags import leak_status
    from uniradix.events.endpoints import bind_flag
    from uniradix.events.publisher import KVEventsConfig
    from uniradix.sim.cluster import Cluster
    from uniradix.sim.cluster_text import cluster_text

    kv_events = None
    if args.kv_events:
        given = {flag.knob: getattr(args, _flag_dest(flag)) for flag in kv_events_flags()}
        given.update(bind=bind_flag(given["bind"]), model=args.config)
        kv_events = KVEventsConfig(**given)
    cluster = Cluster(
        options, args.instances, args.router, kv_events, args.dispatch, args.await_turns
    )
    summary = cluster.run()
    print(json.dumps(summary) if args.json else cluster_text(summary))
    leaked = {i["name"]: sum(i["leaked"].values()) for i in summary["instances"]}
    return leak_status("uniradix replay", "instance", leaked)


def _replay(args: argparse.Namespace) -> int:
    from uniradix.cli_flags import Failed, leak_status, run_reported
    from uniradix.cli_groups import options_from_args
    from uniradix.plan.command import add_pool_bytes, budget_options
    from uniradix.sim.compute import ModelShape
    from uniradix.sim.replay import ReplayOptions, ReplayResult, run_replay
    from uniradix.sim.report import markdown_summary, summary_json, write_report

    def work() -> ReplayResult | int:
        """The replay's result, or the exit status of a cluster replay (which prints its
        own summary)."""
        options = options_from_args(ReplayOptions(), args, replay_flags()).updated(
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
        clustered = args.dispatch == "late" or args.await_turns
        if args.instances != 1 or args.router != "round-robin" or args.kv_events or clustered:
            return _cluster(args, options)
        result = run_replay(options)
        add_pool_bytes(result.summary, sizes)
        return result

    result = run_reported("uniradix replay", work)
    if isinstance(result, Failed):
        return result.status
    if isinstance(result, int):
        return result
    print(summary_json(result) if args.json else markdown_summary(result), end="\n")
    status = 0
    if args.report:
        try:
            paths = write_report(result, args.report)
            print(f"report: {', '.join(map(str, paths))}", file=sys.stderr)
        except RuntimeError as exc:
            print(f"uniradix replay: {exc}", file=sys.stderr)
            status = 1
    return max(status, leak_status("uniradix replay", "pool", result.summary["leaked"]))


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


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand's parser, numeric flags checked (`cli_flags.check_numbers`)."""
    from uniradix.cli_flags import OneLineParser, check_numbers
    from uniradix.plan.command import add_plan_parser

    parser = OneLineParser(prog="uniradix", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="a few requests sharing prefixes, narrated")
    _replay_parser(commands)
    add_generate_parser(commands)
    _events_parser(commands)
    add_plan_parser(commands)
    check_numbers(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from uniradix.demo import run_demo

        run_demo()
        return 0
    if args.command == "generate":
        return run_generate_command(args)
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
        from uniradix.plan.command import run_plan_command

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
