"""The balances service's input: transactions as JSON lines.

One transaction per line, amounts in integer cents (never floats)::

    {"id": 1, "type": "deposit", "account": "acct-0007", "amount": 12500}
    {"id": 2, "type": "withdrawal", "account": "acct-0003", "amount": 2000}
    {"id": 3, "type": "transfer", "from": "acct-0003", "to": "acct-0011", "amount": 750}

Balances may go negative (there is no overdraft rule), so the final balances
depend only on *which* transactions were applied, never on their order: that
is what lets :func:`expected_balances` compute them independently of the
service, by plain summation.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final, TextIO

import attrs

__all__ = [
    "InputError",
    "Transaction",
    "expected_balances",
    "generate",
    "parse_line",
    "write_transactions",
]

_TYPES: Final = frozenset({"deposit", "withdrawal", "transfer"})
_MAX_AMOUNT: Final = 10**12


class InputError(ValueError):
    """A line of the input is not a valid transaction (``line`` is 1-based)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"input line {line}: {reason}")
        self.line = line
        self.reason = reason


@attrs.frozen(slots=True)
class Transaction:
    """One transaction: the balance changes it makes, as ``(account, delta)`` pairs."""

    id: int
    type: str
    changes: tuple[tuple[str, int], ...]


def _account(obj: dict[str, object], field: str, line: int) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value:
        raise InputError(line, f"{field!r} must be a non-empty string, got {value!r:.40}")
    if not value.isprintable():
        raise InputError(line, f"{field!r} must be printable, got {value!r:.40}")
    return value


def parse_line(text: str | bytes, line: int) -> Transaction:
    """Parse one JSON line into a :class:`Transaction`, or raise :class:`InputError`."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InputError(line, f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise InputError(line, "a transaction must be a JSON object")
    txn_id = obj.get("id")
    if type(txn_id) is not int:
        raise InputError(line, f"'id' must be an integer, got {txn_id!r:.40}")
    amount = obj.get("amount")
    if type(amount) is not int or not 0 < amount <= _MAX_AMOUNT:
        raise InputError(line, f"'amount' must be a positive integer (cents), got {amount!r:.40}")
    kind = obj.get("type")
    if kind == "deposit":
        changes: tuple[tuple[str, int], ...] = ((_account(obj, "account", line), amount),)
    elif kind == "withdrawal":
        changes = ((_account(obj, "account", line), -amount),)
    elif kind == "transfer":
        source, target = _account(obj, "from", line), _account(obj, "to", line)
        if source == target:
            raise InputError(line, f"a transfer needs two different accounts, got {source!r}")
        changes = ((source, -amount), (target, amount))
    else:
        raise InputError(line, f"'type' must be one of {sorted(_TYPES)}, got {kind!r:.40}")
    return Transaction(id=txn_id, type=kind, changes=changes)


def generate(count: int, accounts: int, seed: int) -> Iterator[dict[str, object]]:
    """Yield ``count`` random transactions over ``accounts`` accounts, reproducibly from ``seed``."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if accounts < 2:
        raise ValueError(f"accounts must be >= 2 (transfers need two), got {accounts}")
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secret
    width = len(str(accounts - 1))
    names = [f"acct-{index:0{width}d}" for index in range(accounts)]
    for txn_id in range(1, count + 1):
        roll = rng.random()
        amount = rng.randint(1, 100_000)
        if roll < 0.25:
            yield {"id": txn_id, "type": "deposit", "account": rng.choice(names), "amount": amount}
        elif roll < 0.40:
            yield {
                "id": txn_id,
                "type": "withdrawal",
                "account": rng.choice(names),
                "amount": amount,
            }
        else:
            source, target = rng.sample(names, 2)
            yield {"id": txn_id, "type": "transfer", "from": source, "to": target, "amount": amount}


def write_transactions(out: TextIO, transactions: Iterable[dict[str, object]]) -> int:
    """Write ``transactions`` as compact JSON lines; returns how many were written."""
    written = 0
    for txn in transactions:
        out.write(json.dumps(txn, separators=(",", ":")))
        out.write("\n")
        written += 1
    return written


def expected_balances(path: Path) -> tuple[dict[str, int], int]:
    """Sum an input file independently of the service: ``(balances, transactions)``.

    Deliberately shares no code with the service (not even :func:`parse_line`):
    plain ``json`` and integer addition over the whole file, so that a bug in
    the service's parsing or applying cannot hide in the check.
    """
    balances: dict[str, int] = defaultdict(int)
    count = 0
    with path.open("rb") as lines:
        for text in lines:
            if not text.strip():
                continue
            txn = json.loads(text)
            amount = txn["amount"]
            if txn["type"] == "deposit":
                balances[txn["account"]] += amount
            elif txn["type"] == "withdrawal":
                balances[txn["account"]] -= amount
            else:
                balances[txn["from"]] -= amount
                balances[txn["to"]] += amount
            count += 1
    return dict(balances), count
