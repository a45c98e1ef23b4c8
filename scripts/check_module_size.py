"""Fails when a library module grows past the line limit: split it by concept instead."""

import sys
from pathlib import Path


def main() -> int:
    root, limit = Path(sys.argv[1]), int(sys.argv[2])
    too_big = [
        (path, n)
        for path in sorted(root.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > limit
    ]
    for path, n in too_big:
        print(f"{path}: {n} lines > {limit}", file=sys.stderr)
    return 1 if too_big else 0


if __name__ == "__main__":
    sys.exit(main())
