"""A results folder (spec-ab's and spec-tune's `--out`) that the tool shares with nobody: locked for the run,
its own files listed as they are written, and only those ever removed.

- **The lock**: `fcntl.flock` on `.locust-spec.lock` in the folder, held for the whole run, the holder's
  PID written in it; a second run on the folder stops at once, naming that PID (two runs on one folder
  cleared each other's files while measuring). The kernel drops the lock when the process ends, however it
  ends, so a crash never leaves the folder locked.
- **The record** of what the tool wrote, `.locust-spec-files`: one JSON line per entry, appended (one
  `write` of a whole line) *before* the entry is created, so a crash leaves at most a line whose entry was
  never made; a torn last line is ignored. An entry is a file, a folder, or a run's prefix (`baseline/r0`
  owns `baseline/r0_*` and `baseline/r0.log`: Locust writes those, the tool only names the prefix), each
  with the tool that wrote it. `--overwrite` removes exactly the entries of its own tool and refuses a
  folder holding anything else, naming it.
- **No link is followed**: the folder is walked without following symbolic links, and a link anywhere in
  it, or an entry of the wrong type where the tool keeps a file or a folder (a file named `baseline`), is
  refused in one line before anything is written. The record and the lock are opened with O_NOFOLLOW.

Pure parts (`parse`, `Owned`, `foreign`, `wrong_type`, `removal`) decide; `Folder` does the I/O.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TypeVar

from locust_spec.recording.writes import WriteFailed, link_cause, write_whole

RECORD = ".locust-spec-files"
LOCK = ".locust-spec.lock"
OWN = (RECORD, LOCK, RECORD + ".tmp")
"""The folder's own bookkeeping (the record is rewritten whole through a temporary after a clear)."""
KINDS = ("file", "dir", "prefix")
MAX_ENTRIES = 100_000
"""A walk of the folder stops here: a results folder holds hundreds of files, `--out ~` millions."""
_OPEN = os.O_CLOEXEC | os.O_NOFOLLOW
T = TypeVar("T")


class FolderError(Exception):
    """The folder cannot be used as asked; the message is one line."""


@dataclass(frozen=True)
class Entry:
    """One thing in the folder: its path relative to the folder (POSIX) and what it is, not following
    links: 'file', 'dir', 'link' or 'other' (a socket, a FIFO, a device)."""

    rel: str
    kind: str


@dataclass(frozen=True)
class Owned:
    """What one tool's record lists."""

    files: frozenset[str] = frozenset()
    dirs: frozenset[str] = frozenset()
    prefixes: frozenset[str] = frozenset()

    def owns(self, entry: Entry) -> bool:
        """Whether the tool wrote `entry`: a listed file, a file of a listed prefix, a listed folder or one
        that holds something listed (the tool made the folders its files are in). Never a link."""
        if entry.kind == "dir":
            return entry.rel in self.dirs or any(
                p.startswith(entry.rel + "/") for p in (*self.dirs, *self.files, *self.prefixes))
        if entry.kind != "file":
            return False
        return entry.rel in self.files or any(
            entry.rel == p + ".log" or entry.rel.startswith(p + "_") for p in self.prefixes)

    def top(self) -> set[str]:
        """The top-level names the record lists (a prefix's or a file's first folder among them)."""
        return {rel.split("/", 1)[0] for rel in (*self.files, *self.dirs, *self.prefixes)}

    def __bool__(self) -> bool:
        return bool(self.files or self.dirs or self.prefixes)


def line(tool: str, kind: str, rel: str) -> str:
    """One record line (a whole JSON object and its newline)."""
    return json.dumps({"by": tool, kind: rel}, separators=(",", ":")) + "\n"


def parse(text: str, tool: str) -> Owned:
    """The entries `tool` recorded. A line that is not a whole entry (a crash mid-write, an edit) is
    ignored: its entry was never created, or is not the tool's to remove."""
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for raw in text.splitlines():
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(item, dict) or item.get("by") != tool:
            continue
        for kind in KINDS:
            rel = item.get(kind)
            if isinstance(rel, str) and _inside(rel):
                found[kind].add(rel)
    return Owned(frozenset(found["file"]), frozenset(found["dir"]), frozenset(found["prefix"]))


def _inside(rel: str) -> bool:
    """A relative path that stays in the folder (a hand-edited record may say anything)."""
    parts = PurePosixPath(rel).parts
    return bool(parts) and not PurePosixPath(rel).is_absolute() and ".." not in parts


def describe(entry: Entry) -> str:
    return {"dir": "a folder", "link": "a symbolic link", "file": "a file"}.get(entry.kind, "not a file")


def foreign(entries: Iterable[Entry], owned: Owned) -> Entry | None:
    """The first entry the tool did not write (its own record and lock aside); None when all are its own."""
    for entry in entries:
        if entry.rel in OWN and entry.kind == "file":
            continue
        if not owned.owns(entry):
            return entry
    return None


def first_link(entries: Iterable[Entry]) -> Entry | None:
    """The first symbolic link or special file: the tool writes neither, and would write through one."""
    return next((e for e in entries if e.kind not in ("file", "dir")), None)


def wrong_type(entries: Iterable[Entry], dirs: Iterable[str], files: Iterable[str]) -> str | None:
    """Where an entry the tool keeps as a folder (`dirs`) or a file (`files`) is something else: one line;
    None when each is absent or of its kind."""
    want = {**{name: "dir" for name in dirs}, **{name: "file" for name in files}}
    for entry in entries:
        kind = want.get(entry.rel)
        if kind is not None and entry.kind != kind:
            keeps = "a folder" if kind == "dir" else "a file"
            return f"{entry.rel} is {describe(entry)}, where the tool keeps {keeps}"
    return None


def removal(entries: Iterable[Entry], owned: Owned, spare: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(files, folders) to remove to clear what the tool wrote, folders deepest first; nothing under a
    top-level name in `spare` (what this run has written already)."""
    spared = set(spare)
    files, dirs = [], []
    for entry in entries:
        if entry.rel.split("/", 1)[0] in spared or entry.rel in (RECORD, LOCK) or not owned.owns(entry):
            continue
        (dirs if entry.kind == "dir" else files).append(entry.rel)
    return files, sorted(dirs, key=lambda d: -d.count("/"))


def walk(root: Path, limit: int = MAX_ENTRIES) -> Iterator[Entry]:
    """Every entry under `root`, breadth first (top-level names first), never following a link;
    FolderError past `limit` entries."""
    queue, count = [""], 0
    while queue:
        rel_dir = queue.pop(0)
        with os.scandir(root / rel_dir if rel_dir else root) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            count += 1
            if count > limit:
                raise FolderError(f"{root} holds over {limit:,} entries: not a results folder")
            rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
            kind = ("link" if child.is_symlink() else "dir" if child.is_dir(follow_symlinks=False)
                    else "file" if child.is_file(follow_symlinks=False) else "other")
            yield Entry(rel, kind)
            if kind == "dir":
                queue.append(rel)


@dataclass
class Folder:
    """The results folder of one run of `tool`: `lock` it first, then `check` it, `record` entries as they
    are written, and under --overwrite `clear` the tool's earlier ones."""

    root: Path
    tool: str
    _lock: int | None = None
    _written: set[str] = field(default_factory=set)

    def enter(self, admit: Callable[[], T]) -> T:
        """Lock the folder for this process's life and admit it (`admit` raises FolderError to refuse it):
        a run holding the lock is named first; the lock file is made only in a folder admitted, and the
        folder admitted again under the lock (another run may have written meanwhile)."""
        self.lock(create=False)
        admit()
        self.lock()
        return admit()

    def lock(self, create: bool = True) -> None:
        """Take the folder's lock (FolderError naming the holder's PID when another run has it); `create`:
        make the folder and the lock file if need be, else a folder without one is left as it is."""
        if self._lock is not None:
            return
        try:
            if create:
                self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / LOCK, os.O_RDWR | (os.O_CREAT if create else 0) | _OPEN, 0o644)
        except OSError as e:
            if not create and e.errno == errno.ENOENT:
                return
            raise FolderError(f"{self.tool}: cannot use {self.root}: {link_cause(e, LOCK)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise FolderError(f"{self.tool}: {self.root} is in use by another run (pid {holder}); nothing "
                              "was touched: wait for it, or give another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock = fd

    def entries(self) -> list[Entry]:
        return list(self.walk())

    def walk(self) -> Iterator[Entry]:
        return walk(self.root) if self.root.is_dir() else iter(())

    def top(self) -> list[Entry]:
        """The folder's own entries (not what is in its folders)."""
        found = []
        for entry in self.walk():
            if "/" in entry.rel:
                break
            found.append(entry)
        return found

    def owned(self) -> Owned:
        """What this tool's record lists (nothing when there is no record)."""
        try:
            fd = os.open(self.root / RECORD, os.O_RDONLY | _OPEN)
        except FileNotFoundError:
            return Owned()
        except OSError as e:
            raise FolderError(f"{self.tool}: cannot read {self.root / RECORD}: {link_cause(e, RECORD)}") \
                from None
        with os.fdopen(fd, "rb") as fh:
            return parse(fh.read().decode(errors="replace"), self.tool)

    def check(self, dirs: Iterable[str] = (), files: Iterable[str] = ()) -> None:
        """FolderError (one line) when the folder holds a link or special file anywhere, or a wrong-type
        entry where the tool keeps a folder or a file."""
        entries = self.entries()
        link = first_link(entries)
        if link is not None:
            raise self._link(link)
        wrong = wrong_type(entries, dirs, files)
        if wrong is not None:
            raise FolderError(f"{self.tool}: {self.root}/{wrong}; nothing was touched")

    def _link(self, link: Entry) -> FolderError:
        return FolderError(f"{self.tool}: {self.root / link.rel} is {describe(link)}: a results folder holds "
                           "only files and folders (nothing is written through a link); nothing was touched")

    def check_overwrite(self, owned: Owned) -> None:
        """FolderError naming the first entry this tool did not write: --overwrite removes only its own.
        The walk stops there (`--out ~` is refused at its first entry)."""
        entry = foreign(self.walk(), owned)
        if entry is not None and entry.kind not in ("file", "dir"):
            raise self._link(entry)
        if entry is not None:
            raise FolderError(f"{self.tool}: --overwrite refused: {self.root / entry.rel} "
                              f"({describe(entry)}) was not written by {self.tool} (its record, {RECORD}, "
                              "does not list it), and --overwrite removes only what it wrote; nothing was "
                              "touched: move it away or give another --out")

    def record(self, kind: str, path: Path) -> None:
        """Add `path` (in the folder) to the record before it is written; once per run and entry."""
        rel = path.relative_to(self.root).as_posix()
        text = line(self.tool, kind, rel)
        if text in self._written:
            return
        try:
            fd = os.open(self.root / RECORD, os.O_RDWR | os.O_APPEND | os.O_CREAT | _OPEN, 0o644)
            try:
                size = os.fstat(fd).st_size
                torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"  # a crash mid-line: end it first
                os.write(fd, (("\n" if torn else "") + text).encode())
            finally:
                os.close(fd)
        except OSError as e:
            raise WriteFailed(f"cannot write {self.root / RECORD}: {link_cause(e, RECORD)}") from None
        self._written.add(text)

    def file(self, path: Path) -> Path:
        self.record("file", path)
        return path

    def dir(self, path: Path) -> Path:
        self.record("dir", path)
        return path

    def prefix(self, prefix: Path) -> None:
        """Record a run's prefix (Locust writes PREFIX_*, spec-ab PREFIX.log); its folders come with it."""
        self.record("prefix", prefix)

    def clear(self, spare: Iterable[str] = ()) -> None:
        """Remove what this tool wrote before (never anything else: check_overwrite refused a folder holding
        more), sparing the top-level names in `spare`; then the record keeps only what is left."""
        owned = self.owned()
        files, dirs = removal(self.entries(), owned, spare)
        for rel in files:
            (self.root / rel).unlink(missing_ok=True)
        for rel in dirs:
            with contextlib.suppress(OSError):  # not empty: something arrived meanwhile; it stays
                (self.root / rel).rmdir()
        left = [e for e in self.entries() if owned.owns(e)]
        kept = {e.rel for e in left}
        text = "".join(
            [line(self.tool, "file", rel) for rel in sorted(owned.files & kept)]
            + [line(self.tool, "dir", rel) for rel in sorted(owned.dirs & kept)]
            + [line(self.tool, "prefix", p) for p in sorted(owned.prefixes)
               if any(Owned(prefixes=frozenset({p})).owns(e) for e in left)])
        others = self._others()
        write_whole(self.root / RECORD, (others + text).encode())
        self._written = set(text.splitlines(keepends=True))

    def _others(self) -> str:
        """The record's lines of other tools (spec-tune's in a folder spec-ab shares): kept as they are."""
        try:
            text = (self.root / RECORD).read_text(errors="replace")
        except OSError:
            return ""
        out = []
        for raw in text.splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(raw)
                if isinstance(item, dict) and item.get("by") != self.tool:
                    out.append(raw + "\n")
        return "".join(out)
