"""Corruption fuzz: every file kind x flip / zero / truncate / append / delete, and verify = open.

Two base partition directories are built once: ``clean`` (several segments,
cleaned once so there is a cleaner checkpoint and compaction gaps, closed
cleanly) and ``unclean`` (the same, then more commits and a crash: no
marker).  Each trial copies one, damages one file of one kind
(``closed.log``, ``active.log``, ``.index``, ``.timeindex``, the four
checkpoints, the clean-shutdown marker) in one way at a random position, and
then:

1. runs ``statestore verify``'s check (:func:`verify_partition`) and checks it
   changed nothing;
2. opens the log and reads every record, and runs a cleaning pass;
3. holds verify's verdict equal to what the open did: refused with the same
   error type, file and position, or opened having cut exactly what verify
   said it would (no more, no less).

Every outcome must be one of:

- ``exact``: every record is what was written;
- ``refused``: a typed ``ChangelogError`` at open naming a file of the
  directory (or the directory), and the directory unchanged byte for byte;
- ``read-error``: the open succeeded and a read raised a typed error naming
  the damaged file (damage inside a flushed segment, found by the CRC);
- ``torn-tail``: after an unclean shutdown, damage shaped like an interrupted
  write in the active segment past its last offset index entry: cut there
  (the log cannot tell a file cut within the last ``index_interval_bytes``
  from a torn write; before the last index entry it can, and refuses:
  docs/recovery.md);
- ``base-offset``: a flip in a batch's 8-byte base offset (outside the CRC, as
  in Kafka) that keeps offsets in order: keys and values exact, offsets moved
  inside a compaction gap (docs/recovery.md, "What is not detectable");
- ``cleaned-boundary-cut``: a closed segment whose base offset is below
  ``cleaner-swap-offset-checkpoint`` cut exactly at a batch boundary: the
  records of that segment from the cut on are gone, nothing else, because
  below that checkpoint the cleaner may have dropped an emptied last batch and
  the hole looks the same (docs/recovery.md, "Holes between segments").  The
  same cut of a segment at or above the checkpoint must be refused (it is
  counted as ``boundary-cut-refused``).

Anything else (wrong or missing data, an untyped exception, a refused open
that changed a file, verify disagreeing with open) fails the test.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from collections import Counter
from pathlib import Path

import pytest

from changelog import CleanerConfig, LogConfig
from changelog.cleaner.clean import clean_log
from changelog.errors import ChangelogError
from changelog.fs.checkpoint import CLEANER_SWAP_CHECKPOINT, read_checkpoint
from changelog.log.log import Log
from statestore.cli.progress import Progress
from statestore.cli.verify import verify_partition
from tests.reliability import stats
from tests.reliability.conftest import SOAK_SCALE
from tests.reliability.crash import abandon_dir
from tests.reliability.model import commit_ops

SEED = 53
CLEANER = CleanerConfig(dedupe_buffer_size_bytes=1 << 20)
CONFIG = LogConfig(
    segment_bytes=1500,
    index_interval_bytes=150,
    segment_index_bytes=4096,
    delete_retention_ms=0,
    min_cleanable_dirty_ratio=0.01,
    file_delete_delay_ms=0,
)
KINDS = (
    "closed.log",
    "active.log",
    "index",
    "timeindex",
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
    "cleaner-swap-offset-checkpoint",
    "marker",
)
DAMAGES = ("flip", "zero", "truncate", "append", "delete")
CELL_PREFIX = "corruption-fuzz-cell."
Rec = tuple[int, bytes | None, bytes | None]


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 13
        return self.now


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of opens; their fsyncs prove nothing here (power loss has its own test)."""
    monkeypatch.setattr(os, "fsync", lambda _fd: None)


def build(directory: Path, *, clean: bool) -> list[Rec]:
    log = Log.open(directory, config=CONFIG, clock=_Clock())
    for i in range(40):
        log.append(commit_ops(SEED, i))
    log.roll()
    clean_log(log, force=True, config=CLEANER)
    for i in range(40, 52):
        log.append(commit_ops(SEED, i))
    records = [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]
    if clean:
        log.close()
    else:
        log.abandon()
        abandon_dir(directory)
    return records


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def target_file(directory: Path, kind: str, rng: random.Random) -> Path:
    logs = sorted(directory.glob("*.log"))
    if kind == "closed.log":
        return rng.choice(logs[:-1])
    if kind == "active.log":
        return logs[-1]
    if kind in ("index", "timeindex"):
        return rng.choice(sorted(directory.glob(f"*.{kind}")))
    if kind == "marker":
        return directory / ".kafka_cleanshutdown"
    return directory / kind


def damage(path: Path, how: str, rng: random.Random) -> int | None:
    """Damage ``path``; returns the first damaged byte position (``None``: deleted/absent)."""
    if not path.exists():
        return None
    data = bytearray(path.read_bytes())
    if how == "delete":
        path.unlink()
        return None
    if how == "append":
        path.write_bytes(bytes(data) + rng.randbytes(rng.randint(1, 100)))
        return len(data)
    if not data:
        path.write_bytes(rng.randbytes(rng.randint(1, 20)))
        return 0
    at = rng.randrange(len(data))
    if how == "flip":
        data[at] ^= 1 << rng.randrange(8)
    elif how == "zero":
        end = min(len(data), at + rng.randint(1, 64))
        if data[at:end] == bytes(end - at):
            data[at] ^= 0xFF  # already zero there: make it a change
        else:
            data[at:end] = bytes(end - at)
    elif how == "truncate":
        del data[at:]
    path.write_bytes(bytes(data))
    return at


def batches(path: Path) -> list[tuple[int, int, int]]:
    """``(position, size, base offset)`` of the batches of an undamaged ``.log``."""
    data = path.read_bytes()
    out, position = [], 0
    while position + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        out.append((position, length + 12, base))
        position += length + 12
    return out


def read_everything(directory: Path) -> tuple[list[Rec] | None, BaseException | None, str]:
    """``(records, error, stage)``: open, read all, clean once, close."""
    try:
        log = Log.open(directory, config=CONFIG)
    except ChangelogError as exc:
        return None, exc, "open"
    try:
        records = [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]
        log.roll()
        clean_log(log, force=True, config=CLEANER)
        again = [(r.offset, r.key, r.value) for r in log.read(log.log_start_offset)]
        if _state(again) != _state(records):
            raise AssertionError("a cleaning pass changed the key -> value map")
    except ChangelogError as exc:
        return None, exc, "read"
    finally:
        log.close()
    return records, None, "ok"


def _state(records: list[Rec]) -> dict[bytes | None, bytes | None]:
    state: dict[bytes | None, bytes | None] = {}
    for _offset, key, value in records:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


class Fuzz:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.bases: dict[str, tuple[Path, list[Rec]]] = {}
        for name in ("clean", "unclean"):
            directory = tmp_path / "bases" / f"fuzz{name}-0"
            self.bases[name] = (directory, build(directory, clean=name == "clean"))
        self.outcomes: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        self.failures: list[str] = []

    def trial(self, n: int, base: str, kind: str, how: str, rng: random.Random) -> None:
        source, original = self.bases[base]
        directory = self.tmp / f"t{n}" / source.name
        shutil.copytree(source, directory)
        path = target_file(directory, kind, rng)
        layout = batches(path) if path.suffix == ".log" and path.exists() else []
        index = path.with_suffix(".index")
        entries = index.read_bytes() if path.suffix == ".log" and index.exists() else b""
        last_indexed = struct.unpack_from(">i", entries, len(entries) - 4)[0] if entries else 0
        if path != max(directory.glob("*.log")):
            last_indexed = -1  # not the active segment: nothing may be cut
        proof = max(read_checkpoint(directory / CLEANER_SWAP_CHECKPOINT).values(), default=-1)
        at = damage(path, how, rng)
        label = f"#{n} {base} {kind} {how} at {at}"
        before = snapshot(directory)
        report = verify_partition(directory, Progress("verify", enabled=False))
        if snapshot(directory) != before:
            self.failures.append(f"{label}: verify changed the directory")
        try:
            records, error, stage = read_everything(directory)
        except Exception as exc:  # noqa: BLE001 - an untyped exception is the finding
            self.failures.append(f"{label}: untyped {type(exc).__name__}: {exc}")
            return
        outcome = self.classify(
            label, base, path, at, layout, last_indexed, original, records, error, stage, proof
        )
        verdict = report.verdict
        assert verdict is not None
        if stage == "open":
            if snapshot(directory) != before:
                self.failures.append(f"{label}: the refused open changed the directory")
            same = (
                verdict.refused
                and verdict.error == type(error).__name__
                and verdict.path == getattr(error, "path", None)
                and verdict.position == getattr(error, "position", None)
            )
            if not same:
                self.failures.append(f"{label}: verify said {verdict}, open raised {error!r}")
        elif verdict.refused:
            self.failures.append(f"{label}: verify said the open is refused ({verdict}), it opened")
        elif records is not None and verdict.log_end_offset is not None:
            end = records[-1][0] + 1 if records else None
            if end is not None and end > verdict.log_end_offset:
                self.failures.append(
                    f"{label}: verify's log end {verdict.log_end_offset}, read {end}"
                )
        self.outcomes[outcome] += 1
        self.by_kind[f"{kind}/{how}"] += 1
        stats.record(
            f"corruption-fuzz.{kind}",
            trials=1,
            faults=1,
            wrong=int(outcome == "wrong"),
        )
        stats.note(f"corruption-fuzz.{kind}", outcome)
        cell = f"{CELL_PREFIX}{kind}.{how}"  # the file kind x damage matrix of the report
        stats.record(cell, trials=1, faults=1, wrong=int(outcome == "wrong"))
        stats.note(cell, outcome)
        boundary = how == "truncate" and any(p == at for p, _s, _b in layout)
        if boundary and last_indexed < 0 and int(path.stem) >= proof:
            if outcome != "refused":
                self.failures.append(f"{label}: a boundary cut above the swap checkpoint opened")
            stats.note(f"corruption-fuzz.{kind}", "boundary-cut-refused")

    def classify(
        self,
        label: str,
        base: str,
        path: Path,
        at: int | None,
        layout: list[tuple[int, int, int]],
        last_indexed: int,
        original: list[Rec],
        records: list[Rec] | None,
        error: BaseException | None,
        stage: str,
        proof: int,
    ) -> str:
        if error is not None:
            named = getattr(error, "path", None)
            if named is None or (named != path.parent and named.parent != path.parent):
                self.failures.append(f"{label}: {type(error).__name__} names no file here: {error}")
                return "wrong"
            return "refused" if stage == "open" else "read-error"
        assert records is not None
        if records == original:
            return "exact"
        if [(k, v) for _o, k, v in records] == [(k, v) for _o, k, v in original]:
            in_base_offset = at is not None and any(
                position <= at < position + 8 for position, _s, _b in layout
            )
            if in_base_offset:
                return "base-offset"
        if base == "unclean" and path.suffix == ".log" and last_indexed >= 0:
            # A torn-looking tail after a crash is cut.  The indexes prove the batches up to
            # the last indexed one; after it (at most index_interval_bytes of batches) a cut
            # file cannot be told from a write cut short: the documented limit.
            cut = [b for p, _s, b in layout if p >= last_indexed and at is not None and p <= at]
            if cut and any(records == [r for r in original if r[0] < b] for b in cut):
                return "torn-tail"
        if path.suffix == ".log" and at is not None and last_indexed < 0:
            # The documented limit of a compacted log: the cleaner drops a group's emptied
            # last batch (Kafka's rule), so a cleaned segment may end before the next one
            # begins, and a closed segment below the swap checkpoint cut exactly at a batch
            # boundary looks the same.  Counted apart (never as "exact"), and only for exactly
            # that shape; above the swap checkpoint the same cut is refused.
            boundary = [b for p, _s, b in layout if p == at]
            if boundary and int(path.stem) < proof:
                segment = _in_segment(original, boundary[0], path)
                missing = [r for r in original if r not in records]
                if (
                    missing
                    and all(r in segment for r in missing)
                    and all(r in original for r in records)
                ):
                    return "cleaned-boundary-cut"
        self.failures.append(
            f"{label}: silent wrong or missing data ({len(records)} records, {len(original)} written)"
        )
        return "wrong"


def _in_segment(original: list[Rec], first: int, path: Path) -> list[Rec]:
    """The records of ``original`` from offset ``first`` up to the segment after ``path``."""
    bases = sorted(int(q.stem) for q in path.parent.glob("*.log"))
    later = [b for b in bases if b > int(path.stem)]
    end = later[0] if later else None
    return [r for r in original if r[0] >= first and (end is None or r[0] < end)]


def run_fuzz(tmp_path: Path, trials_per_cell: int) -> Fuzz:
    fuzz = Fuzz(tmp_path)
    rng = random.Random(SEED)
    n = 0
    for kind in KINDS:
        for how in DAMAGES:
            for k in range(trials_per_cell):
                base = "clean" if k % 2 == 0 else "unclean"
                fuzz.trial(n, base, kind, how, rng)
                n += 1
    return fuzz


@pytest.mark.slow  # a long fault sweep: the slow tier
def test_corruption_fuzz(tmp_path: Path) -> None:
    fuzz = run_fuzz(tmp_path, 23)  # 9 kinds x 5 damages x 23 = 1,035 trials
    assert sum(fuzz.outcomes.values()) + len(fuzz.failures) >= 1000
    assert not fuzz.failures, f"{len(fuzz.failures)} failure(s): {fuzz.failures[:8]}"


@pytest.mark.slow
def test_corruption_fuzz_bigger(tmp_path: Path) -> None:
    fuzz = run_fuzz(tmp_path, 26 * SOAK_SCALE)
    assert not fuzz.failures, f"{len(fuzz.failures)} failure(s): {fuzz.failures[:8]}"
