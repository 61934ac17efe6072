"""The balances service: input parsing, exactly-once processing across crashes, and the demo."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from examples.balances import demo
from examples.balances.__main__ import main as balances_main
from examples.balances.generate import main as generate_main
from examples.balances.processor import (
    PARTITIONS,
    balances_of,
    open_balances,
    process,
    read_position,
)
from examples.balances.transactions import (
    InputError,
    expected_balances,
    generate,
    parse_line,
    write_transactions,
)
from statestore import StateManager
from statestore.testing import CrashHarness
from tests.examples.services import balances_service

ROOT = Path(__file__).resolve().parents[2]


def write_input(path: Path, count: int, accounts: int = 40, seed: int = 3) -> Path:
    with path.open("w", encoding="utf-8") as out:
        write_transactions(out, generate(count, accounts, seed))
    return path


def sum_first_lines(path: Path, lines: int) -> dict[str, int]:
    """Balances after the first ``lines`` lines, summed here without the service's code."""
    balances: dict[str, int] = defaultdict(int)
    with path.open("rb") as source:
        for number, text in enumerate(source, start=1):
            if number > lines:
                break
            txn = json.loads(text)
            if txn["type"] == "deposit":
                balances[txn["account"]] += txn["amount"]
            elif txn["type"] == "withdrawal":
                balances[txn["account"]] -= txn["amount"]
            else:
                balances[txn["from"]] -= txn["amount"]
                balances[txn["to"]] += txn["amount"]
    return dict(balances)


def stored_state(state_dir: Path) -> tuple[dict[str, int], int]:
    with StateManager(state_dir) as manager:
        store = open_balances(manager)
        return balances_of(iter(store.items())), read_position(manager.metadata).line


# --------------------------------------------------------------------------- input


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"id": "x", "type": "deposit", "account": "a", "amount": 1}', "'id'"),
        ('{"id": 1, "type": "deposit", "account": "a", "amount": 0}', "'amount'"),
        ('{"id": 1, "type": "deposit", "account": "a", "amount": 1.5}', "'amount'"),
        ('{"id": 1, "type": "refund", "account": "a", "amount": 1}', "'type'"),
        ('{"id": 1, "type": "deposit", "account": "", "amount": 1}', "'account'"),
        ('{"id": 1, "type": "deposit", "account": "a\\u0000b", "amount": 1}', "printable"),
        ('{"id": 1, "type": "transfer", "from": "a", "to": "a", "amount": 1}', "two different"),
    ],
)
def test_parse_line_rejects_bad_transactions_naming_the_line(line: str, reason: str) -> None:
    with pytest.raises(InputError, match=f"input line 7: .*{reason}") as info:
        parse_line(line, 7)
    assert info.value.line == 7


def test_parse_line_turns_a_transfer_into_two_changes() -> None:
    txn = parse_line('{"id": 9, "type": "transfer", "from": "a", "to": "b", "amount": 5}', 1)
    assert txn.changes == (("a", -5), ("b", 5))


def test_generator_is_reproducible_and_the_cli_writes_the_same_lines(tmp_path: Path) -> None:
    assert list(generate(50, 5, 1)) == list(generate(50, 5, 1))
    assert list(generate(50, 5, 1)) != list(generate(50, 5, 2))
    out = tmp_path / "t.jsonl"
    assert generate_main(["--count", "50", "--accounts", "5", "--seed", "1", "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert [json.loads(line) for line in lines] == list(generate(50, 5, 1))


def test_generator_cli_rejects_one_account(capsys: pytest.CaptureFixture[str]) -> None:
    assert generate_main(["--accounts", "1"]) == 2
    assert "at least 2" in capsys.readouterr().err


def test_expected_balances_conserves_money_on_transfers(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"id":1,"type":"deposit","account":"a","amount":10}\n'
        "\n"
        '{"id":2,"type":"transfer","from":"a","to":"b","amount":4}\n'
        '{"id":3,"type":"withdrawal","account":"b","amount":1}\n'
    )
    assert expected_balances(path) == ({"a": 6, "b": 3}, 3)


# --------------------------------------------------------------------------- processing


def test_process_applies_every_transaction_and_a_rerun_applies_nothing_twice(
    tmp_path: Path,
) -> None:
    input_path = write_input(tmp_path / "t.jsonl", 1_000)
    expected, _ = expected_balances(input_path)
    state_dir = tmp_path / "state"
    for _ in range(2):
        with StateManager(state_dir) as manager, input_path.open("rb") as source:
            process(open_balances(manager), manager.metadata, manager.commit, source, seekable=True)
    balances, line = stored_state(state_dir)
    assert balances == expected
    assert line == 1_000


def test_each_commit_is_one_transaction_over_the_balances_and_the_position(
    tmp_path: Path,
) -> None:
    """Every commit spans the balance partitions and the metadata store: one decided transaction."""
    input_path = write_input(tmp_path / "t.jsonl", 300)
    with StateManager(tmp_path / "state") as manager, input_path.open("rb") as source:
        store = open_balances(manager)
        summary = process(
            store, manager.metadata, manager.commit, source, seekable=True, commit_every=100
        )
        assert summary.commits == 3
        assert store.partitions == PARTITIONS
        for log in (*store.changelogs, *manager.metadata.changelogs):
            kinds = [
                (h.is_transactional, h.is_control)
                for h, _ in log.read_batches(0, isolation="read_uncommitted")
            ]
            assert kinds == [(True, False), (True, True)] * 3, log.dir
        assert read_position(manager.metadata).line == 300


@pytest.mark.parametrize("step", ["T1.1", "T2", "T3", "T4.1"])
def test_a_crash_inside_a_commit_keeps_the_position_with_its_balances(
    tmp_path: Path, step: str
) -> None:
    """No ordering trick: a crash at any step of the third commit leaves both or neither."""
    input_path = write_input(tmp_path / "t.jsonl", 300)
    state_dir = tmp_path / "state"
    manager = StateManager(state_dir)
    commits = 0

    class Crash(BaseException):
        pass

    def hook(name: str) -> None:
        if name == step and commits == 2:
            raise Crash

    def commit() -> None:
        nonlocal commits
        manager.commit()
        commits += 1

    manager.coordinator.fault_hook = hook
    with pytest.raises(Crash), input_path.open("rb") as source:
        process(
            open_balances(manager),
            manager.metadata,
            commit,
            source,
            seekable=True,
            commit_every=100,
        )
    manager.crash()
    balances, line = stored_state(state_dir)
    assert line == (300 if step in ("T3", "T4.1") else 200)
    assert balances == sum_first_lines(input_path, line)


def test_a_bad_line_commits_everything_before_it_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    input_path = tmp_path / "t.jsonl"
    lines = [json.dumps(t) for t in generate(10, 4, 1)]
    lines.insert(6, '{"id": 99, "type": "deposit", "account": "x"}')
    input_path.write_text("\n".join(lines) + "\n")
    state_dir = tmp_path / "state"
    status = balances_main(["--state-dir", str(state_dir), "--input", str(input_path)])
    assert status == 1
    assert "input line 7: 'amount'" in capsys.readouterr().err
    balances, line = stored_state(state_dir)
    assert line == 6
    assert balances == sum_first_lines(input_path, 6)


def test_missing_input_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        balances_main(["--state-dir", str(tmp_path / "s"), "--input", str(tmp_path / "nope")])
    assert info.value.code == 2
    assert "no such file" in capsys.readouterr().err


def test_stdin_restart_skips_the_committed_lines_after_an_in_process_crash(
    tmp_path: Path,
) -> None:
    input_path = write_input(tmp_path / "t.jsonl", 700)
    data = input_path.read_bytes()
    state_dir = tmp_path / "state"
    calls = 0

    def stop_after_450() -> bool:
        nonlocal calls
        calls += 1
        return calls > 450

    manager = StateManager(state_dir)
    store = open_balances(manager)
    # Uncommitted work after the last commit (line 400) is lost by the crash.
    store_commit_every = 100
    summary = process(
        store,
        manager.metadata,
        manager.commit,
        io.BytesIO(data),
        seekable=False,
        commit_every=store_commit_every,
        stop=stop_after_450,
    )
    assert summary.stopped
    manager.crash()

    with StateManager(state_dir) as manager:
        store = open_balances(manager)
        assert read_position(manager.metadata).line == 450  # the stop committed what it had applied
        process(
            store,
            manager.metadata,
            manager.commit,
            io.BytesIO(data),
            seekable=False,
            commit_every=100,
        )
    balances, line = stored_state(state_dir)
    assert line == 700
    assert balances == expected_balances(input_path)[0]


# --------------------------------------------------------------------------- crash tests (statestore.testing)


@pytest.mark.parametrize(("kill_after_acks", "kill_delay_s"), [(1, 0.0), (9, 0.002)])
def test_kill9_midway_then_restart_applies_each_transaction_exactly_once(
    crash_harness: CrashHarness, tmp_path: Path, kill_after_acks: int, kill_delay_s: float
) -> None:
    input_path = write_input(tmp_path / "t.jsonl", 2_000)
    args = (str(input_path), 50)

    run = crash_harness.run(
        balances_service, args=args, kill_after_acks=kill_after_acks, kill_delay_s=kill_delay_s
    )
    assert run.killed
    assert run.exitcode == -9
    with crash_harness.reopen() as manager:
        store = open_balances(manager)
        position = read_position(manager.metadata).line
        # Nothing acknowledged is lost, and the state is exactly that of the committed prefix.
        assert position >= run.last_ack
        assert position < 2_000
        assert balances_of(iter(store.items())) == sum_first_lines(input_path, position)

    finish = crash_harness.run(balances_service, args=args)
    assert not finish.killed
    assert finish.result == 2_000
    assert finish.acks[0] > position  # resumed after the committed position, not from the start
    with crash_harness.reopen() as manager:
        store = open_balances(manager)
        assert read_position(manager.metadata).line == 2_000
        assert balances_of(iter(store.items())) == expected_balances(input_path)[0]


# --------------------------------------------------------------------------- the demo


def test_demo_end_to_end_verifies_after_a_real_kill9(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.balances.demo",
            "--count",
            "4000",
            "--commit-every",
            "200",
            "--kill-seed",
            "11",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "killed with SIGKILL" in result.stdout
    assert "VERIFIED" in result.stdout
    assert "MISMATCH" not in result.stdout


def test_demo_reports_mismatch_and_exits_1_when_balances_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = expected_balances

    def off_by_one(path: Path) -> tuple[dict[str, int], int]:
        balances, count = real(path)
        first = min(balances)
        balances[first] += 1
        return balances, count

    monkeypatch.setattr(demo, "expected_balances", off_by_one)
    monkeypatch.chdir(ROOT)
    status = demo.main(
        [
            "--count",
            "2000",
            "--commit-every",
            "100",
            "--kill-seed",
            "1",
            "--state-dir",
            str(tmp_path / "s"),
        ]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "MISMATCH" in out
    assert "expected" in out


def test_demo_refuses_a_non_empty_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "junk").write_text("x")
    with pytest.raises(SystemExit) as info:
        demo.main(["--state-dir", str(tmp_path)])
    assert info.value.code == 2
    assert "not empty" in capsys.readouterr().err
