"""`uniradix generate`: its flags, grouped as `GenerateOptions`' knobs, and the command."""

from __future__ import annotations

import argparse
import json
import sys

from uniradix.cli_groups import SCHEDULED_POOL_FLAGS, Flag, add_flags, options_from_args

WRITE_POLICIES = ["write_through", "write_through_selective", "write_back"]


def generate_flags() -> list[Flag]:
    """`uniradix generate`'s flags on `GenerateOptions` knobs (one line adds one)."""
    from uniradix.engine.run import CONFIG_PATTERNS, DTYPES

    n = {"type": int}
    on = {"action": "store_true"}
    return [
        Flag("--config", "config", "the tiny model's layers", {"choices": sorted(CONFIG_PATTERNS)}),
        Flag("--prompts", "prompts", "JSONL file, one list of token ids per line"),
        Flag("--num-prompts", "num_prompts", "generated prompts", n),
        Flag("--prompt-len", "prompt_len", "tokens per generated prompt", n),
        Flag("--shared-prefix-len", "shared_prefix_len", "tokens all generated prompts share", n),
        Flag("--seed", "seed", "seed of the generated prompts", n),
        Flag("--max-new-tokens", "max_new_tokens", "tokens generated per prompt", n),
        Flag("--dtype", "dtype", "", {"choices": sorted(DTYPES)}),
        Flag("--verify", "verify", "also run without the cache, compare", on),
        *SCHEDULED_POOL_FLAGS,
        Flag("--sliding-window", "sliding_window", "SWA window of the model (tokens)", n),
        Flag("--device", "device", ""),
        Flag("--host-tokens", "host_tokens", "host tier (L2) size in full-KV tokens", n),
        Flag("--write-policy", "write_policy", "", {"choices": WRITE_POLICIES}),
        Flag("--host-layout", "host_layout", "", {"choices": ["layer_first", "page_first"]}),
        Flag("--host-engine", "host_engine", "", {"choices": ["sync", "thread", "cuda"]}),
    ]


def add_generate_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from uniradix.engine.run import GenerateOptions

    p = commands.add_parser(
        "generate",
        help="generate with the tiny reference model on the cache's pools",
        description="Greedy generation with the tiny hybrid model, its KV and states in the "
        "cache's pools. Exit status 1 when --verify finds a mismatch or a pool leaks.",
    )
    add_flags(p, GenerateOptions(), generate_flags())
    p.add_argument_group("output").add_argument(
        "--json", action="store_true", help="print one JSON object"
    )


def run_generate_command(args: argparse.Namespace) -> int:
    import torch

    from uniradix.cli_flags import Failed, leak_status, run_reported
    from uniradix.engine.run import GenerateOptions, run_generate, text_summary

    options = options_from_args(GenerateOptions(), args, generate_flags())
    # The tiny model's tensors are too small for intra-op threads: on a busy machine their
    # barrier waits made a run 200x slower.
    torch.set_num_threads(1)
    summary = run_reported("uniradix generate", lambda: run_generate(options))
    if isinstance(summary, Failed):
        return summary.status
    print(json.dumps(summary) if args.json else text_summary(summary))
    status = leak_status("uniradix generate", "pool", summary["leaked"])
    if summary["mismatches"]:
        print(
            f"uniradix generate: prompts {summary['mismatched_prompts']} differ from the "
            "no-cache run",
            file=sys.stderr,
        )
        status = 1
    return status
