"""Run files on a disk that may fill up: appends that end at a record's end, replacements whole or not at all.

A full disk (ENOSPC), a quota or a vanished mount fails a write part-way: Python's buffered files then hold
half a row on disk and raise wherever the next flush happens to be. Here an append either lands whole or the
file is cut back to where the last whole one ended (and closed), and a replaced file (latency.json,
summary.json) is written beside it and renamed, its temporary removed when that fails. Either way the caller
gets one `WriteFailed` whose message is one line: the file and the cause.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import os
from collections.abc import Iterable
from pathlib import Path


class WriteFailed(Exception):
    """A run file could not be written; the message names the file and the cause, in one line."""


_NOFOLLOW = os.O_CLOEXEC | os.O_NOFOLLOW
"""Run files are never written through a symbolic link: one planted in a results folder would send them
(and a truncation) anywhere the user may write."""


def link_cause(e: OSError, name: object) -> str:
    """An open's failure in words: O_NOFOLLOW's ELOOP is a link where a file was to be."""
    return f"{name} is a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))


def _failed(path: Path, e: OSError) -> WriteFailed:
    return WriteFailed(f"cannot write {path}: {link_cause(e, path.name)}")


def csv_bytes(rows: Iterable[Iterable[object]]) -> bytes:
    """Rows as a CSV writer writes them (`\\r\\n` line ends, quoting as needed), UTF-8."""
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue().encode("utf-8")


class RecordFile:
    """A new file (truncated if it exists) that takes whole records, in order, unbuffered: each `append`
    is on disk whole once it returns, or the file ends at the previous record's end and is closed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        try:
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o666)
        except OSError as e:
            raise _failed(path, e) from None

    @property
    def closed(self) -> bool:
        return self._fd is None

    def append(self, data: bytes) -> None:
        """Write `data` whole; on failure cut the file back to its last whole record, close it, raise
        WriteFailed. Nothing is written to a closed file."""
        if self._fd is None:
            raise WriteFailed(f"cannot write {self.path}: closed after an earlier failure")
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += os.write(self._fd, view[done:])
        except OSError as e:
            self._cut()
            raise _failed(self.path, e) from None
        self.size += len(data)

    def _cut(self) -> None:
        # Frees what the failed write took (it never needs space); if even that fails (a vanished mount),
        # the failure that matters is the write's, raised by the caller.
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self.size)
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def write_whole(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically: a reader sees the old file or the new one, never half; on
    failure the old file stays, no temporary is left, and WriteFailed says why."""
    tmp = path.with_name(path.name + ".tmp")
    try:  # os.replace puts the new file in place of a link at `path`: it never writes through one
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o666)
    except OSError as e:
        raise _failed(path, e) from None  # (a link at the temporary's name is not ours to remove)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):  # the failure that matters is the one raised below
            tmp.unlink(missing_ok=True)
        raise _failed(path, e) from None
