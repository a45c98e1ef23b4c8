"""Command-line flags declared against the configuration's knobs, shown grouped in `--help`.

A `Flag` names its knob by the flat name (`uniradix.config.Nested`); its default is read from
the front end's options (`ReplayOptions()`, `GenerateOptions()`), never declared again, and
it lands in the `--help` section of the group that declares the knob. Adding a flag for a
knob is one `Flag(...)` line in the front end's list; `options_from_args` then carries its
value into the options.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from uniradix.config import Nested, group_of

N = TypeVar("N", bound=Nested)


@dataclass(frozen=True)
class Flag:
    """`name` sets knob `knob`; `kwargs` go to `add_argument` (type, choices, action);
    `exclusive` flags of one group exclude each other."""

    name: str
    knob: str
    help: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    exclusive: bool = False


# The pools and the scheduler's step, flagged alike by every front end that has them.
SCHEDULED_POOL_FLAGS = (
    Flag("--page-size", "page_size", "tokens per page", {"type": int}),
    Flag("--full-tokens", "full_tokens", "full-attention KV pool size (tokens)", {"type": int}),
    Flag("--swa-tokens", "swa_tokens", "SWA KV pool size (tokens)", {"type": int}),
    Flag("--mamba-slots", "mamba_slots", "Mamba state slots", {"type": int}),
    Flag("--max-running", "max_running", "cap on running requests", {"type": int}),
    Flag("--chunk-size", "chunk_size", "prefill tokens per step", {"type": int}),
    Flag("--check-invariants", "check_invariants", "after every step", {"action": "store_true"}),
)


def add_flags(
    parser: argparse.ArgumentParser, defaults: Nested, flags: Sequence[Flag]
) -> dict[str, argparse._ArgumentGroup]:
    """Adds `flags` to `parser`, each in the section of its knob's group (the options' own
    fields in one "run" section), with the default `defaults` gives. Returns the sections
    by title, for flags added beside them by hand."""
    values = defaults.flat()
    sections: dict[str, argparse._ArgumentGroup] = {}
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for flag in flags:
        if flag.knob not in values:
            raise ValueError(f"{flag.name}: {type(defaults).__name__} has no knob {flag.knob!r}")
        title = group_of(defaults, flag.knob) or "run"
        section = sections.get(title) or sections.setdefault(
            title, parser.add_argument_group(title)
        )
        target: Any = section
        if flag.exclusive:
            target = exclusive.get(title) or exclusive.setdefault(
                title, section.add_mutually_exclusive_group()
            )
        default = values[flag.knob]
        shown = "" if default is None or isinstance(default, bool) else f" (default {default})"
        target.add_argument(
            flag.name,
            dest=flag.knob,
            default=default,
            help=f"{flag.help}{shown}".strip() or None,
            **flag.kwargs,
        )
    return sections


def options_from_args(defaults: N, args: argparse.Namespace, flags: Sequence[Flag]) -> N:
    """`defaults` with every flag's parsed value."""
    return defaults.updated(**{f.knob: getattr(args, f.knob) for f in flags})
