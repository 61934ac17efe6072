"""``statestore repair salvage`` and ``rebuild-checkpoints`` on corrupted state directories.

One template: two stores (``carts``, 7 keys updated over and over; ``orders``,
one new key per commit) committed together 40 times, so every commit is a
transaction over both changelogs (a data batch and a COMMIT marker in each),
segments of 2 KiB.  Each test damages a copy in one way (a flipped byte in a
closed segment, in the active segment, in a marker, in the last batch of a
segment, in a checkpoint, an index, the coordinator's log) and checks what
survives, what is reported (offsets, keys, transactions with their
participants) and that the dry run changes nothing.  ``kill -9`` during a
remedy: a child process SIGKILLs itself at every file-system step of the
remedy, and the directory must then be exactly as before or as after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from changelog import LogConfig
from changelog.errors import ChangelogError
from changelog.log.log import Log
from changelog.record.batch import decode_header
from changelog.repair.salvage import plan_salvage
from statestore import StateManager, StateManagerConfig
from statestore.errors import RepairInProgressError, RestoreError
from tests.cli.helpers import run_cli

SMALL_LOG = LogConfig(segment_bytes=2048, index_interval_bytes=128)
QUIET = StateManagerConfig(run_cleaner=False)
COMMITS = 40
Rec = tuple[int, bytes | None, bytes | None]


def build_two_stores(state_dir: Path) -> Path:
    with StateManager(state_dir, config=QUIET, log_config=SMALL_LOG) as manager:
        carts = manager.store("carts")
        orders = manager.store("orders")
        for i in range(COMMITS):
            carts.put(f"c{i % 7}", {"n": i})
            orders.put(f"o{i}", {"n": i})
            manager.commit()
    return state_dir


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_two_stores(tmp_path_factory.mktemp("salvage") / "state")


@pytest.fixture
def state(tmp_path: Path, template: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "state"))


def tree_hash(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != "LOG" and "rocksdb" not in str(path):
            digest.update(str(path.relative_to(directory)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def batch_positions(path: Path) -> list[tuple[int, int, int, bool]]:
    """``(position, base offset, last offset, is control)`` of every batch of ``path``."""
    data = path.read_bytes()
    out, position = [], 0
    while position < len(data):
        header = decode_header(data, position, path=path)
        out.append((position, header.base_offset, header.last_offset, header.is_control))
        position += header.size_in_bytes
    return out


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def records(partition: Path) -> list[Rec]:
    with Log.open(partition, config=SMALL_LOG) as log:
        return [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]


def store_state(state: Path, name: str) -> dict[str, object]:
    with StateManager(state, config=QUIET) as manager:
        return dict(manager.store(name).items())


def data_batch_at(segment: Path, index: int) -> tuple[int, int]:
    """``(position, offset)`` of the ``index``-th data batch of ``segment``."""
    data = [(p, base) for p, base, _last, control in batch_positions(segment) if not control]
    return data[index]


# --------------------------------------------------------------------------- closed segment


def test_salvage_keeps_every_valid_batch_after_a_flipped_byte_in_a_closed_segment(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carts = state / "carts-changelog-0"
    orders = state / "orders-changelog-0"
    original = records(carts)
    orders_before = tree_hash(orders)
    segment = carts / "00000000000000000026.log"
    position, offset = data_batch_at(segment, 2)  # offset 30: the data of commit 15
    flip(segment, position + 30)  # inside the CRC-covered attributes..records

    verify = run_cli(["verify", str(state), "--json"], capsys)
    assert verify.status == 1
    problems = [p for part in json.loads(verify.out)["partitions"] for p in part["problems"]]
    assert [(p["position"], p["offset"]) for p in problems] == [(position, offset)]
    with pytest.raises(RestoreError) as failed_open:
        store_state(state, "carts")
    assert failed_open.value.offset == offset  # the open names verify's first bad offset

    before = tree_hash(state)
    dry = run_cli(["repair", "salvage", str(carts)], capsys)
    assert dry.status == 0, dry.err
    assert tree_hash(state) == before
    lost_key = f"c{15 % 7}"
    assert f"unreadable: {segment.name} bytes [{position}, " in dry.out
    assert f"lost: offset {offset}\n" in dry.out
    assert f"keys (read without the CRC, may be wrong): {lost_key}" in dry.out
    assert "transactions split by the damage: 1" in dry.out
    assert f"its COMMIT marker at offset {offset + 1} is kept" in dry.out
    assert f"orders-changelog-0 from offset {offset}\n" in dry.out
    assert f"statestore repair roll-back {carts} --offset {offset}\n" in dry.out
    assert f"orders-changelog-0 at {offset}" in dry.out
    assert "dry run: nothing was changed" in dry.out

    doc = json.loads(run_cli(["repair", "salvage", str(carts), "--json"], capsys).out)["plan"]
    assert tree_hash(state) == before
    assert [(d["first_offset"], d["end_offset"]) for d in doc["lost"]] == [(offset, offset + 1)]
    (txn,) = doc["transactions"]
    assert (txn["lost"], txn["marker_offset"], txn["certain"], txn["exact"]) == (
        "data",
        offset + 1,
        True,
        True,
    )
    assert {(p["topic"], p["first_offset"]) for p in txn["participants"]} == {
        ("carts-changelog", offset),
        ("orders-changelog", offset),
    }

    applied = run_cli(["repair", "salvage", str(carts), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert "verify: OK" in applied.out
    assert records(carts) == [r for r in original if r[0] != offset]  # all the rest survives
    assert tree_hash(orders) == orders_before  # the other store is not touched
    assert run_cli(["verify", str(state)], capsys).status == 0
    assert (
        run_cli(
            ["repair", "rebuild-rocksdb", str(state), "--store", "carts", "--apply"], capsys
        ).status
        == 0
    )
    got = store_state(state, "carts")
    assert got[lost_key] == {"n": 36}  # commit 15 is lost; the later commits of c1 survive
    assert len(got) == 7


def test_the_consistent_roll_back_leaves_every_store_at_the_same_commit(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carts = state / "carts-changelog-0"
    segment = carts / "00000000000000000026.log"
    position, offset = data_batch_at(segment, 2)  # commit 15's data in carts
    flip(segment, position + 30)
    doc = json.loads(run_cli(["repair", "salvage", str(carts), "--json"], capsys).out)["plan"]
    (txn,) = doc["transactions"]
    cut = {(c["topic"], c["offset"]) for c in txn["roll_back"]}
    assert cut == {("carts-changelog", offset), ("orders-changelog", offset)}  # every later
    # commit spans both stores; the salvage plan prints the command that applies that cut
    printed = run_cli(["repair", "salvage", str(carts)], capsys).out
    command = f"statestore repair roll-back {carts} --offset {offset}"
    assert f"        {command}\n" in printed
    args = command.split()[1:]
    before = tree_hash(state)
    assert run_cli(args, capsys).status == 0  # the dry run: damage and all, nothing changed
    assert tree_hash(state) == before
    done = run_cli([*args, "--apply"], capsys)  # the damage lies in the removed part
    assert done.status == 0, done.err
    assert done.out.count("verify: OK") == 2
    again = run_cli([*args, "--apply"], capsys)  # idempotent
    assert again.status == 0, again.err
    assert "nothing to remove" in again.out
    assert run_cli(["verify", str(state)], capsys).status == 0
    assert not (state / "carts-rocksdb-0").exists()  # J3: restored from the changelog
    commits = offset // 2  # 0..14: a data batch and a marker each
    assert store_state(state, "orders") == {f"o{i}": {"n": i} for i in range(commits)}
    assert store_state(state, "carts") == {
        f"c{k}": {"n": max(i for i in range(commits) if i % 7 == k)} for k in range(7)
    }


def test_salvage_closes_a_segment_whose_last_batch_is_lost_with_an_empty_batch(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carts = state / "carts-changelog-0"
    original = records(carts)
    segment = carts / "00000000000000000000.log"
    position, _base, last, control = batch_positions(segment)[-1]
    assert control and last == 25  # the COMMIT marker of commit 12 ends segment 0
    flip(segment, position + 40)
    plan = plan_salvage(carts)
    assert [r.placeholder for r in plan.rewrites] == [(24, 25)]  # the dropped data and marker
    (loss,) = plan.transactions
    assert (loss.lost, loss.first_offset) == ("marker", 24)  # its data is dropped
    assert [(b.base_offset, b.keys) for b in plan.dropped] == [(24, (b"c5",))]
    applied = run_cli(["repair", "salvage", str(carts), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert "dropped: offsets 24..24" in applied.out
    assert "verify: OK" in applied.out
    assert records(carts) == [r for r in original if r[0] != 24]
    with Log.open(carts, config=SMALL_LOG) as log:
        assert log.log_end_offset == 2 * COMMITS
        assert log.last_stable_offset == log.log_end_offset  # nothing left open


def test_salvage_in_the_active_segment_keeps_the_batches_after_the_damage(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    orders = state / "orders-changelog-0"
    original = records(orders)
    active = orders / "00000000000000000078.log"
    position, offset = data_batch_at(active, 0)
    flip(active, position + 30)
    with pytest.raises(ChangelogError):
        records(orders)
    applied = run_cli(["repair", "salvage", str(orders), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert records(orders) == [r for r in original if r[0] != offset]


def test_a_transaction_lost_whole_is_named_from_the_coordinator_log(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carts = state / "carts-changelog-0"
    active = carts / "00000000000000000078.log"  # the last transaction: data 78, marker 79
    data = bytearray(active.read_bytes())
    for position in range(20, len(data), 37):  # nothing of it readable
        data[position] ^= 0x5A
    active.write_bytes(bytes(data))
    doc = json.loads(run_cli(["repair", "salvage", str(carts), "--json"], capsys).out)["plan"]
    assert [(d["first_offset"], d["end_offset"]) for d in doc["lost"]] == [(78, None)]
    (txn,) = doc["transactions"]
    assert (txn["lost"], txn["first_offset"], txn["known"]) == ("all", 78, True)
    assert {(p["topic"], p["first_offset"]) for p in txn["participants"]} == {
        ("carts-changelog", 78),
        ("orders-changelog", 78),
    }
    applied = run_cli(["repair", "salvage", str(carts), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert "committed (the coordinator's log says so)" in applied.out
    with Log.open(carts, config=SMALL_LOG) as log:
        assert log.log_end_offset == 78


def test_salvage_of_the_coordinator_log_keeps_the_other_decisions(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    coordinator = state / "__transaction_state-0"
    segment = coordinator / "00000000000000000000.log"
    batches = batch_positions(segment)
    position = batches[5][0]
    flip(segment, position + 30)
    assert run_cli(["verify", str(state)], capsys).status == 1
    applied = run_cli(["repair", "salvage", str(coordinator), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert "lost: offset 5" in applied.out
    with Log.open(coordinator) as log:
        assert [r.offset for r in log.read(0)] == [b[1] for b in batches if b[1] != 5]
    assert store_state(state, "orders")["o39"] == {"n": 39}


def test_salvage_refuses_nothing_to_do_and_leftovers(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carts = state / "carts-changelog-0"
    nothing = run_cli(["repair", "salvage", str(carts)], capsys)
    assert nothing.status == 0
    assert "nothing to salvage" in nothing.out
    stale = carts / "00000000000000000026.log.cleaned"  # an undecided replace's leftover
    stale.write_bytes(b"")
    done = run_cli(["repair", "salvage", str(carts), "--apply"], capsys)
    assert done.status == 0, done.err
    assert "left over: 00000000000000000026.log.cleaned" in done.out
    assert not stale.exists()
    decided = carts / "00000000000000000026.log.swap"  # a decided replace: the same bytes
    decided.write_bytes((carts / "00000000000000000026.log").read_bytes())
    dry = run_cli(["repair", "salvage", str(carts)], capsys)
    assert dry.status == 1
    assert "a decided segment replace" in dry.err
    completed = run_cli(["repair", "salvage", str(carts), "--apply"], capsys)
    assert completed.status == 0, completed.err
    assert "the loader completes it first" in completed.out
    assert not decided.exists()


# --------------------------------------------------------------------------- truncate


def test_truncate_at_the_last_committed_transaction_names_its_participants(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carts = state / "carts-changelog-0"
    last = 2 * (COMMITS - 1)  # the last transaction's data in both changelogs
    dry = run_cli(["repair", "truncate", str(carts), "--offset", str(last)], capsys)
    assert dry.status == 0, dry.err
    assert f"committed (marker at {last + 1})" in dry.out
    assert f"also in orders-changelog-0 from offset {last}" in dry.out
    assert f"statestore repair roll-back {carts} --offset {last}\n" in dry.out
    before = tree_hash(state)
    refused = run_cli(["repair", "truncate", str(carts), "--offset", str(last), "--apply"], capsys)
    assert refused.status == 1
    assert "cross-store atomicity would break" in refused.err
    assert tree_hash(state) == before
    rolled = run_cli(["repair", "roll-back", str(carts), "--offset", str(last), "--apply"], capsys)
    assert rolled.status == 0, rolled.err  # both rolled back, RocksDB deleted: they agree again
    assert not (state / "carts-rocksdb-0").exists()
    assert not (state / "orders-rocksdb-0").exists()
    assert "o39" not in store_state(state, "orders")
    assert store_state(state, "carts")[f"c{(COMMITS - 1) % 7}"] == {"n": COMMITS - 1 - 7}


# --------------------------------------------------------------------------- checkpoints, index


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("recovery-point-offset-checkpoint", lambda b: b[:5]),
        ("recovery-point-offset-checkpoint", lambda b: b.replace(b" 80", b" 99")),
        ("log-start-offset-checkpoint", lambda b: b[:-3]),
    ],
)
def test_rebuild_checkpoints_repairs_a_damaged_checkpoint(
    state: Path, capsys: pytest.CaptureFixture[str], name: str, damage: object
) -> None:
    carts = state / "carts-changelog-0"
    original = records(carts)
    path = carts / name
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    assert run_cli(["verify", str(state)], capsys).status == 1
    before = tree_hash(state)
    dry = run_cli(["repair", "rebuild-checkpoints", str(carts)], capsys)
    assert dry.status == 0, dry.err
    assert name in dry.out
    assert tree_hash(state) == before
    applied = run_cli(["repair", "rebuild-checkpoints", str(carts), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert "verify: OK" in applied.out
    assert records(carts) == original
    assert store_state(state, "carts")["c4"] == {"n": 39}


def test_a_flipped_index_byte_is_found_by_verify_or_rebuilt(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carts = state / "carts-changelog-0"
    original = records(carts)
    index = carts / "00000000000000000026.index"
    flip(index, 5)
    found = run_cli(["verify", str(state), "--strict"], capsys)
    assert found.status == 1  # a warning: the next open rebuilds it (L7)
    assert "the next open will rebuild indexes (pass L7)" in found.out
    assert "nothing to salvage" in run_cli(["repair", "salvage", str(carts)], capsys).out
    applied = run_cli(["repair", "rebuild-indexes", str(carts), "--apply"], capsys)
    assert applied.status == 0, applied.err
    assert records(carts) == original
    assert run_cli(["verify", str(state), "--strict"], capsys).status == 0


# --------------------------------------------------------------------------- kill -9

_CHILD = """
import os, signal, sys
from changelog.fs.files import inject_faults
from statestore.cli import main
k = int(sys.argv[1])
seen = 0
def hook(step, path):
    global seen
    if not step.startswith(("repair.", "atomic_write")):
        return
    seen += 1
    if seen == k:
        os.kill(os.getpid(), signal.SIGKILL)
with inject_faults(hook):
    status = main(sys.argv[2:])
print("STEPS", seen)
sys.exit(status)
"""


def run_child(k: int, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(k), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def log_files(partition: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(partition.glob("*.log"))}


def effective_segments(partition: Path) -> dict[str, bytes]:
    """The ``.log`` files as the loader's passes L3-L5 leave them (read, nothing changed)."""
    plain = log_files(partition)
    cleaned = sorted(partition.glob("*.log.cleaned"))
    swaps = sorted(partition.glob("*.log.swap"))
    if cleaned:  # L3: the swap did not finish: every .swap at or above it goes too
        lowest = min(p.name for p in cleaned)
        swaps = [p for p in swaps if p.name < lowest]
    for swap in swaps:  # L4-L5 (a salvaged segment keeps its base offset)
        plain[swap.name.removesuffix(".swap")] = swap.read_bytes()
    return plain


def open_once(partition: Path) -> None:
    with Log.open(partition, config=SMALL_LOG):
        pass


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_kill_9_at_every_step_of_a_salvage_leaves_the_directory_before_or_after(
    tmp_path: Path, template: Path
) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(template, damaged)
    carts = damaged / "carts-changelog-0"
    for segment, index in (("00000000000000000026.log", 2), ("00000000000000000052.log", 5)):
        position, _offset = data_batch_at(carts / segment, index)
        flip(carts / segment, position + 30)
    # the active segment: its first batch flipped (a valid one follows: the loader refuses
    # the directory whatever the checkpoints say), and the log end moves too (step V1):
    # zeros after the last batch, after the clean close
    active = carts / "00000000000000000078.log"
    position, _offset = data_batch_at(active, 0)
    flip(active, position + 30)
    active.write_bytes(active.read_bytes() + b"\x00" * 30)
    refused = tmp_path / "refused"
    shutil.copytree(damaged, refused)
    with pytest.raises(ChangelogError):
        records(refused / carts.name)
    original = log_files(carts)

    after_dir = tmp_path / "after"
    shutil.copytree(damaged, after_dir)
    full = run_child(0, ["repair", "salvage", str(after_dir / carts.name), "--apply"])
    assert full.returncode == 0, full.stderr
    steps = int(full.stdout.rsplit("STEPS", 1)[1])
    assert steps >= 8
    after = log_files(after_dir / carts.name)
    assert after != original
    outcomes = {"before": 0, "after": 0}
    for k in range(1, steps + 1):
        trial = tmp_path / f"k{k}"
        shutil.copytree(damaged, trial)
        partition = trial / carts.name
        killed = run_child(k, ["repair", "salvage", str(partition), "--apply"])
        assert killed.returncode == -signal.SIGKILL, (k, killed.stdout, killed.stderr)
        now = effective_segments(partition)
        assert now in (original, after), k
        outcomes["before" if now == original else "after"] += 1
        # the way back: the remedy run again (its V0 deletes an undecided replace; a
        # decided one the loader completes at the open that follows it)
        again = run_child(0, ["repair", "salvage", str(partition), "--apply"])
        assert again.returncode == 0, (k, again.stdout, again.stderr)
        assert log_files(partition) == after, k
        shutil.rmtree(trial)
    print("salvage kill -9 outcomes", outcomes)
    assert outcomes["before"] and outcomes["after"], outcomes


def test_kill_9_at_every_step_of_rebuild_checkpoints(tmp_path: Path, template: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(template, damaged)
    carts = damaged / "carts-changelog-0"
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        (carts / name).write_bytes((carts / name).read_bytes()[:4])
    expected = records_of_copy(template / carts.name, tmp_path / "expected" / carts.name)
    full = run_child(0, ["repair", "rebuild-checkpoints", str(carts), "--apply", "--json"])
    steps = int(full.stdout.rsplit("STEPS", 1)[1])
    shutil.rmtree(damaged)
    for k in range(1, steps + 1):
        trial = tmp_path / f"k{k}"
        shutil.copytree(template, trial)
        partition = trial / carts.name
        for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
            (partition / name).write_bytes((partition / name).read_bytes()[:4])
        before = {p.name: p.read_bytes() for p in partition.glob("*.log")}
        killed = run_child(k, ["repair", "rebuild-checkpoints", str(partition), "--apply"])
        assert killed.returncode == -signal.SIGKILL, (k, killed.stderr)
        assert {p.name: p.read_bytes() for p in partition.glob("*.log")} == before, k
        again = run_child(0, ["repair", "rebuild-checkpoints", str(partition), "--apply"])
        assert again.returncode == 0, (k, again.stdout, again.stderr)
        assert records(partition) == expected, k
        shutil.rmtree(trial)


def records_of_copy(partition: Path, scratch: Path) -> list[Rec]:
    shutil.copytree(partition, scratch)
    return records(scratch)


@pytest.mark.slow  # a long fault sweep (120 s at load 14): the slow tier
def test_kill_9_at_every_step_of_a_truncate_is_all_or_nothing_for_the_state_directory(
    tmp_path: Path, template: Path
) -> None:
    """In a state directory a truncation runs under the repair journal (docs/recovery.md):
    killed halfway, the directory is as before or as after, or it holds the journal and
    ``StateManager`` refuses it; the partition alone (``Log.open``, which the journal does
    not guard) is then a prefix of the old log holding everything below the cut (K4:
    segments above the cut go newest first).  Run again, it ends as after."""
    name = "carts-changelog-0"
    scratch = tmp_path / "scratch"
    shutil.copytree(template, scratch)
    original = records(scratch / name)
    cut = 30
    args = ["repair", "truncate", "{}", "--offset", str(cut), "--apply", "--split-transactions"]
    after_dir = tmp_path / "after"
    shutil.copytree(template, after_dir)
    full = run_child(0, [a.format(after_dir / name) for a in args])
    assert full.returncode == 0, full.stderr
    steps = int(full.stdout.rsplit("STEPS", 1)[1])
    after = log_files(after_dir / name)
    original_files = log_files(template / name)
    outcomes = {"before": 0, "after": 0, "prefix": 0, "journal": 0}
    for k in range(1, steps + 1):
        trial = tmp_path / f"k{k}"
        shutil.copytree(template, trial)
        partition = trial / name
        killed = run_child(k, [a.format(partition) for a in args])
        assert killed.returncode == -signal.SIGKILL, (k, killed.stdout, killed.stderr)
        if (trial / ".repair-journal").exists():
            outcomes["journal"] += 1
            with pytest.raises(RepairInProgressError):
                StateManager(trial, config=QUIET)
        else:
            assert log_files(partition) in (original_files, after), k
        found = records(partition)  # the loader finishes what the kill left
        assert found == original[: len(found)], k  # a prefix, nothing altered
        assert [r for r in found if r[0] < cut] == [r for r in original if r[0] < cut], k
        kind = (
            "before"
            if found == original
            else "after"
            if max(r[0] for r in found) < cut
            else "prefix"
        )
        outcomes[kind] += 1
        again = run_child(0, [a.format(partition) for a in args])
        assert again.returncode == 0, (k, again.stdout, again.stderr)
        assert log_files(partition) == after, k
        shutil.rmtree(trial)
    print("truncate kill -9 outcomes", outcomes)
    assert outcomes["before"] and outcomes["after"] and outcomes["journal"], outcomes
