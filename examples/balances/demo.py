"""Placeholder end-to-end demo, replaced by the balances service (issue 7)."""

from __future__ import annotations

import sys


def main() -> int:
    """Run the demo."""
    print("the balances demo is not built yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
