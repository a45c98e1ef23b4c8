"""Up-front validation of command-line flags: every numeric flag is checked when it is parsed,
and a bad value ends in one line naming the flag, exit status 2, never a traceback.

`OneLineParser` replaces argparse's usage dump with the single error line. `check_numbers`
walks every subcommand's flags declared `type=int` / `type=float` and swaps in a checking
type, so a flag added later is covered without listing it here: integers must be >= 1 unless
`INT_MINIMUM` says otherwise, floats must lie in `[0, 1]` (most float flags are fractions)
unless `POSITIVE_FLOATS` lists them (sizes relative to something, durations: any value > 0).
`byte_size` parses budgets such as `40GB` (decimal units) or `40GiB` (binary units).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from typing import NamedTuple, NoReturn, TypeVar

T = TypeVar("T")

# Integer flags that may be 0; every other integer flag must be >= 1.
INT_MINIMUM = {
    "--seed": 0,
    "--full-layers": 0,
    "--swa-layers": 0,
    "--mamba-layers": 0,
    "--shared-prefix-len": 0,
    "--kv-events-sender-wait-ms": 0,
}
# Float flags that are not fractions: any finite value > 0.
POSITIVE_FLOATS = {"--hicache-ratio", "--timeout"}
BYTE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")


class Failed(NamedTuple):
    """A command's failure, already reported on stderr: its exit status."""

    status: int


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`prog: error: message`), exit status 2.
    Subparsers inherit the class, so every subcommand behaves the same."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"int>={minimum}"
    return parse


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def fraction(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text}")
    return value


def byte_size(text: str) -> int:
    """`40GB` -> 40 * 10**9, `1.5GiB` -> 1.5 * 2**30 (floored), `1024` -> 1024 bytes."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in BYTE_UNITS:
        units = ", ".join(k for k in BYTE_UNITS if k)
        raise argparse.ArgumentTypeError(
            f"expected a size such as 40GB or 24GiB (units {units}), got {text!r}"
        )
    value = math.floor(float(match.group(1)) * BYTE_UNITS[unit])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def checked_name(check: Callable[[object], str]) -> Callable[[str], str]:
    """An argparse type from a library check that raises ValueError naming the bad value
    (a retired eviction order names its replacement) and returns the name to use."""

    def parse(text: str) -> str:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def byte_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes (`8GB,16GB,32GB`), each as `byte_size` reads it."""
    return [byte_size(part) for part in text.split(",")]


def check_numbers(parser: argparse.ArgumentParser) -> None:
    """Gives every `type=int` / `type=float` flag of `parser` and its subcommands a checking
    type (mutates the parser's actions)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                check_numbers(sub)
            continue
        flag = next((s for s in action.option_strings if s.startswith("--")), None)
        if flag is None:
            continue
        if action.type is int:
            action.type = int_at_least(INT_MINIMUM.get(flag, 1))
        elif action.type is float:
            action.type = positive_float if flag in POSITIVE_FLOATS else fraction


def resource_failure(exc: BaseException) -> str | None:
    """The one-line message for pools that could not be allocated (numpy's MemoryError,
    torch's CPU allocator RuntimeError) or are too small for any request to make progress
    (`SchedulerStalled`); None for any other error."""
    from uniradix.sim.scheduler_config import SchedulerStalled

    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, SchedulerStalled):
        return f"the pools are too small for the requests to make progress: {first}"
    if isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
    ):
        return f"the pools do not fit in this machine's memory (pool sizes, --max-running): {first}"
    return None


def fail(prog: str, message: str) -> int:
    """Prints the one-line error of a check made after parsing; returns exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def run_reported(prog: str, work: Callable[[], T]) -> T | Failed:
    """`work()`, or, when it fails in a way a user can act on, that failure printed as one
    line and its exit status: 1 for a broken invariant, 2 for bad input, a file error or
    pools that cannot be allocated or make no progress. Any other error propagates."""
    from uniradix.errors import InvariantError

    try:
        return work()
    except InvariantError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return Failed(1)
    except (ValueError, OSError) as exc:
        return Failed(fail(prog, str(exc)))
    except (MemoryError, RuntimeError) as exc:
        if (message := resource_failure(exc)) is None:
            raise
        return Failed(fail(prog, message))


def leak_status(prog: str, what: str, leaked: dict[str, int]) -> int:
    """1 after printing the nonzero entries of `leaked` (slots per pool or per instance that
    no request holds and no pool counts free), else 0."""
    nonzero = {name: n for name, n in leaked.items() if n}
    if not nonzero:
        return 0
    print(f"{prog}: leaked slots per {what}: {nonzero}", file=sys.stderr)
    return 1
