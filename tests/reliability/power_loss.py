"""Record the file operations of a workload, then build the disk images a power cut could leave.

:class:`Recorder` wraps the ``os`` functions the changelog calls (``open``,
``write``, ``pwrite``, ``lseek``, ``ftruncate``, ``fsync``, ``fdatasync``, ``close``,
``replace``, ``rename``, ``unlink``, ``mkdir``; :mod:`pathlib` calls them too) for paths
under one root, lets each real call happen, and keeps a model of the file
system beside it with POSIX's durability rules:

- a file's data (and size) is durable once the file was fsynced, or fdatasynced
  (fdatasync(2) flushes the size when it changed; timestamps, which the model does
  not keep, are all it may leave behind); a file that was never fsynced is empty
  after a power cut;
- a directory entry (a create, a rename, an unlink, a mkdir) is durable once
  its *directory* was fsynced; until then the old entry may be what survives;
- nothing else is promised: an un-fsynced file's newer content may survive,
  or a prefix of it, or not; of a directory's entry changes since its last
  fsync, any subset survives (each change atomic: a rename is never half
  done; but not necessarily in order, so a protocol that needs one change
  durable before the next must fsync between them);
- an un-fsynced change to a file may survive cut short: a prefix of it, byte by
  byte where it extends the file, whole 512-byte sectors where it overwrites
  bytes that were durable (a disk writes a sector atomically; a write into
  preallocated zeros leaves the sectors it did not reach zero).

Every operation is one step of :attr:`Recorder.events` (and
:meth:`Recorder.mark` adds workload markers such as "commit 12
acknowledged").  :meth:`Recorder.image` materialises the directory tree as
it could be after a power cut right after step ``k``: ``strict`` keeps only
what was durable; ``rng`` keeps each un-durable change (a directory entry, a
file's newer content or a prefix of it) at random.

Files under the root that existed before recording are taken as durable.
``fsync`` itself is not passed on to the kernel while recording: what it
makes durable is the model's business, and hundreds of real fsyncs would
only make the test slow.
Descriptors the model does not know (outside the root) pass through untouched.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

_REAL = {
    name: getattr(os, name)
    for name in (
        "open",
        "write",
        "pwrite",
        "lseek",
        "ftruncate",
        "fsync",
        "fdatasync",
        "close",
        "replace",
        "rename",
        "unlink",
        "mkdir",
    )
}


@attrs.define
class _Inode:
    is_dir: bool
    data: bytearray = attrs.field(factory=bytearray)
    durable: bytes = b""
    entries: dict[str, int] = attrs.field(factory=dict)
    durable_entries: dict[str, int] = attrs.field(factory=dict)
    pending: list[tuple[str, str, str | int | None]] = attrs.field(factory=list)
    """Entry changes since the last fsync: ``("set", name, inode)``, ``("del", name, None)``,
    ``("rename", src, dst)``."""


@attrs.define
class _Fd:
    inode: int
    position: int
    append: bool


@attrs.frozen
class Event:
    """One recorded step: ``op`` (``write``, ``fsync``, ``rename``, ... or ``mark``) and details."""

    op: str
    path: str
    detail: Any = None


class Recorder:
    """The model file system under ``root`` and the steps that changed it (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.events: list[Event] = []
        self._inodes: list[_Inode] = []
        self._fds: dict[int, _Fd] = {}
        self._snapshots: list[tuple[list[_Inode], int]] = []
        self._root_inode = self._load(self.root)

    # ----------------------------------------------------------------- the model

    def _new(self, inode: _Inode) -> int:
        self._inodes.append(inode)
        return len(self._inodes) - 1

    def _load(self, path: Path) -> int:
        if path.is_dir():
            entries = {child.name: self._load(child) for child in sorted(path.iterdir())}
            return self._new(_Inode(True, entries=entries, durable_entries=dict(entries)))
        data = path.read_bytes()
        return self._new(_Inode(False, data=bytearray(data), durable=data))

    def _lookup(self, path: Path) -> tuple[int | None, int | None, str]:
        """``(parent directory inode, inode or None, name)`` of a path under the root."""
        relative = path.relative_to(self.root).parts
        if not relative:
            return None, self._root_inode, ""
        current = self._root_inode
        for part in relative[:-1]:
            found = self._inodes[current].entries.get(part)
            if found is None:
                return None, None, relative[-1]
            current = found
        return current, self._inodes[current].entries.get(relative[-1]), relative[-1]

    def _mine(self, path: Any) -> Path | None:
        if isinstance(path, int):
            return None
        resolved = Path(os.fspath(path)).resolve()
        try:
            resolved.relative_to(self.root)
        except ValueError:
            return None
        return resolved

    def mark(self, name: str, detail: Any = None) -> None:
        """A workload marker (e.g. ``("ack", 12)``) between file-system steps."""
        self.events.append(Event("mark", name, detail))

    def _record(self, op: str, path: Path, detail: Any = None) -> None:
        self.events.append(Event(op, str(path.relative_to(self.root)), detail))
        self._snapshots.append((self._copy(), len(self.events)))

    def _copy(self) -> list[_Inode]:
        return [
            _Inode(
                i.is_dir,
                data=bytearray(i.data),
                durable=i.durable,
                entries=dict(i.entries),
                durable_entries=dict(i.durable_entries),
                pending=list(i.pending),
            )
            for i in self._inodes
        ]

    # ----------------------------------------------------------------- the wrappers

    def _open(self, path: Any, flags: int, mode: int = 0o777, *args: Any, **kw: Any) -> int:
        fd: int = _REAL["open"](path, flags, mode, *args, **kw)
        mine = self._mine(path)
        if mine is None:
            return fd
        parent, inode, name = self._lookup(mine)
        if inode is None:
            if parent is None or not flags & os.O_CREAT:
                return fd
            inode = self._new(_Inode(False))
            self._inodes[parent].entries[name] = inode
            self._inodes[parent].pending.append(("set", name, inode))
            self._record("create", mine)
        elif flags & os.O_TRUNC and not self._inodes[inode].is_dir:
            self._inodes[inode].data = bytearray()
            self._record("truncate", mine, 0)
        position = len(self._inodes[inode].data) if flags & os.O_APPEND else 0
        self._fds[fd] = _Fd(inode, position, bool(flags & os.O_APPEND))
        return fd

    def _write(self, fd: int, data: Any) -> int:
        written: int = _REAL["write"](fd, data)
        known = self._fds.get(fd)
        if known is None:
            return written
        inode = self._inodes[known.inode]
        at = len(inode.data) if known.append else known.position
        chunk = bytes(memoryview(data)[:written])
        if at > len(inode.data):
            inode.data.extend(bytes(at - len(inode.data)))
        inode.data[at : at + written] = chunk
        known.position = at + written
        self._record("write", self._path_of(known.inode), (at, written))
        return written

    def _pwrite(self, fd: int, data: Any, position: int) -> int:
        written: int = _REAL["pwrite"](fd, data, position)
        known = self._fds.get(fd)
        if known is None:
            return written
        inode = self._inodes[known.inode]
        if known.append:  # Linux: pwrite on an O_APPEND descriptor appends
            position = len(inode.data)
        chunk = bytes(memoryview(data)[:written])
        if position > len(inode.data):
            inode.data.extend(bytes(position - len(inode.data)))
        inode.data[position : position + written] = chunk
        self._record("write", self._path_of(known.inode), (position, written))
        return written

    def _lseek(self, fd: int, position: int, how: int) -> int:
        result: int = _REAL["lseek"](fd, position, how)
        if fd in self._fds:
            self._fds[fd].position = result
        return result

    def _ftruncate(self, fd: int, size: int) -> None:
        _REAL["ftruncate"](fd, size)
        known = self._fds.get(fd)
        if known is None:
            return
        inode = self._inodes[known.inode]
        if size < len(inode.data):
            del inode.data[size:]
        else:
            inode.data.extend(bytes(size - len(inode.data)))
        self._record("truncate", self._path_of(known.inode), size)

    def _fsync(self, fd: int) -> None:
        # no real fsync: durability is what the model says (and the test stays fast)
        known = self._fds.get(fd)
        if known is None:
            return
        inode = self._inodes[known.inode]
        if inode.is_dir:
            inode.durable_entries = dict(inode.entries)
            inode.pending.clear()
        else:
            inode.durable = bytes(inode.data)
        self._record("fsync", self._path_of(known.inode))

    def _close(self, fd: int) -> None:
        _REAL["close"](fd)
        self._fds.pop(fd, None)

    def _move(self, op: str, src: Any, dst: Any, *args: Any, **kw: Any) -> None:
        _REAL[op](src, dst, *args, **kw)
        mine_src, mine_dst = self._mine(src), self._mine(dst)
        if mine_src is None or mine_dst is None:
            return
        src_parent, inode, src_name = self._lookup(mine_src)
        dst_parent, _old, dst_name = self._lookup(mine_dst)
        if src_parent is None or dst_parent is None or inode is None:
            return
        del self._inodes[src_parent].entries[src_name]
        self._inodes[dst_parent].entries[dst_name] = inode
        if src_parent == dst_parent:
            self._inodes[src_parent].pending.append(("rename", src_name, dst_name))
        else:
            self._inodes[src_parent].pending.append(("del", src_name, None))
            self._inodes[dst_parent].pending.append(("set", dst_name, inode))
        self._record("rename", mine_src, str(mine_dst.relative_to(self.root)))

    def _unlink(self, path: Any, *args: Any, **kw: Any) -> None:
        _REAL["unlink"](path, *args, **kw)
        mine = self._mine(path)
        if mine is None:
            return
        parent, inode, name = self._lookup(mine)
        if parent is not None and inode is not None:
            del self._inodes[parent].entries[name]
            self._inodes[parent].pending.append(("del", name, None))
            self._record("unlink", mine)

    def _mkdir(self, path: Any, mode: int = 0o777, *args: Any, **kw: Any) -> None:
        _REAL["mkdir"](path, mode, *args, **kw)
        mine = self._mine(path)
        if mine is None:
            return
        parent, _inode, name = self._lookup(mine)
        if parent is not None:
            inode = self._new(_Inode(True))
            self._inodes[parent].entries[name] = inode
            self._inodes[parent].pending.append(("set", name, inode))
            self._record("mkdir", mine)

    def _path_of(self, inode: int) -> Path:
        """A current path of ``inode`` (for the event log; unlinked files keep their last one)."""
        if inode == self._root_inode:
            return self.root
        stack = [(self._root_inode, self.root)]
        while stack:
            current, path = stack.pop()
            for name, child in self._inodes[current].entries.items():
                if child == inode:
                    return path / name
                if self._inodes[child].is_dir:
                    stack.append((child, path / name))
        return self.root / f"<unlinked inode {inode}>"

    @contextmanager
    def recording(self) -> Iterator[Recorder]:
        """Wrap the ``os`` functions for the block (module docstring)."""
        wrappers = {
            "open": self._open,
            "write": self._write,
            "pwrite": self._pwrite,
            "lseek": self._lseek,
            "ftruncate": self._ftruncate,
            "fsync": self._fsync,
            "fdatasync": self._fsync,
            "close": self._close,
            "replace": lambda s, d, *a, **k: self._move("replace", s, d, *a, **k),
            "rename": lambda s, d, *a, **k: self._move("rename", s, d, *a, **k),
            "unlink": self._unlink,
            "mkdir": self._mkdir,
        }
        saved = {name: getattr(os, name) for name in wrappers}
        for name, wrapper in wrappers.items():
            setattr(os, name, wrapper)
        try:
            yield self
        finally:
            for name, previous in saved.items():
                setattr(os, name, previous)

    # ----------------------------------------------------------------- images

    @property
    def steps(self) -> int:
        """How many file-system steps were recorded (crash points are 0..steps)."""
        return len(self._snapshots)

    def marks_before_crash(self, step: int, name: str = "ack") -> list[Any]:
        """The details of the ``name`` markers a crash right after step ``step`` (before step
        ``step + 1``) has seen: what the workload had acknowledged by then."""
        limit = self._snapshots[step][1] - 1 if step < len(self._snapshots) else len(self.events)
        return [e.detail for e in self.events[:limit] if e.op == "mark" and e.path == name]

    def image(self, step: int, target: Path, rng: random.Random | None = None) -> None:
        """Write into ``target`` the tree a power cut right after step ``step`` could leave."""
        inodes = self._initial if step == 0 else self._snapshots[step - 1][0]
        target.mkdir(parents=True, exist_ok=False)
        self._materialise(inodes, self._root_inode, target, rng)

    def start(self) -> None:
        """Remember the state at step 0 (call before the workload)."""
        self._initial = self._copy()

    def _materialise(
        self, inodes: list[_Inode], directory: int, target: Path, rng: random.Random | None
    ) -> None:
        node = inodes[directory]
        entries = dict(node.durable_entries)
        if rng is not None and node.pending:
            kept = [change for change in node.pending if rng.random() < 0.5]
            for kind, name, other in kept:
                if kind == "set":
                    assert isinstance(other, int)
                    entries[name] = other
                elif kind == "del":
                    entries.pop(name, None)
                elif name in entries:
                    assert isinstance(other, str)
                    entries[other] = entries.pop(name)
        for name, child in sorted(entries.items()):
            inode = inodes[child]
            if inode.is_dir:
                (target / name).mkdir()
                self._materialise(inodes, child, target / name, rng)
                continue
            data = inode.durable
            if rng is not None and bytes(inode.data) != inode.durable:
                choice = rng.random()
                current = bytes(inode.data)
                if choice < 0.4:
                    data = current
                elif choice < 0.7:
                    data = _cut_short(inode.durable, current, rng)
            (target / name).write_bytes(data)


_SECTOR = 512


def _cut_short(durable: bytes, current: bytes, rng: random.Random) -> bytes:
    """``current`` written up to a random point after its first change (module docstring):
    byte-exact past the durable end, at a sector boundary over durable bytes."""
    first = next(
        (i for i, (old, new) in enumerate(zip(durable, current, strict=False)) if old != new),
        min(len(durable), len(current)),
    )
    cut = rng.randrange(first, len(current) + 1)
    if cut < len(durable):
        cut = cut // _SECTOR * _SECTOR
        return current[:cut] + durable[cut:]
    return current[:cut]
