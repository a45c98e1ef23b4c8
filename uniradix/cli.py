"""Command line entry point: thin argument parsing; the work lives in the library."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="uniradix", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="a few requests sharing prefixes, narrated")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from uniradix.demo import run_demo

        run_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
