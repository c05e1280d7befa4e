"""One reading loop per event loop: every stream being read is read by it, all the ready ones per wake-up.

A greenlet per stream waiting for its socket costs a libev watcher start and stop, two greenlet switches and
a failed or waited read per chunk, for every chunk of every stream: about half of a process's time at a few
hundred streams. Here the streams' sockets stay registered in one epoll set for their whole body; its one
greenlet wakes when any is readable, first reads (and stamps) every ready socket, then hands each read to its
stream. Servers answer in steps (vLLM writes every running stream's token at once), so a wake-up serves many
streams. A stream's own greenlet (its Locust user) sleeps until its body has ended or failed: two switches
per request instead of per chunk. Only streams whose reads the kernel stamps are read here (what time a read
happens then moves no timestamp; see GATHER_S): on Linux without TLS. Others read in their own greenlets.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol

import gevent
import gevent.monkey
from gevent.hub import Waiter

_epoll = gevent.monkey.get_original("select", "epoll") if gevent.monkey.is_module_patched("select") else None
if _epoll is None:
    try:
        from select import epoll as _epoll
    except ImportError:  # not Linux
        _epoll = None
_EPOLLIN = 1
GATHER_S = 0.001
"""After the first socket is readable, how long the loop lets others become so before it reads them all: the
streams it reads carry the kernel's receive stamps, so reading a little later moves no timestamp, and a
wake-up then serves a whole decode step's chunks instead of one (well under any decode step: a stream's
next chunk is not there yet)."""
AVAILABLE = _epoll is not None
# per hub (a thread's event loop; threading.local is per greenlet once gevent has patched it)
_readers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Stream(Protocol):
    def read(self) -> tuple[bytes, float]:
        """One non-blocking read of the socket and its arrival time; BlockingIOError when nothing is there."""

    def take(self, data: bytes, t: float) -> bool:
        """The read's bytes (b"" at the peer's close): True when the stream has ended; raises when it
        failed."""

    def ended(self) -> None:
        """Called (in the reading loop) as soon as the stream has ended or failed: e.g. stop its timers."""


class Reader:
    """The reading loop of one gevent hub: `follow(fd, stream)` blocks the calling greenlet until the stream
    has ended (its `take` said so) and returns, or raises what its read or `take` raised."""

    def __init__(self, gather_s: float = GATHER_S) -> None:
        self.hub = gevent.get_hub()
        self.gather_s = gather_s
        self._ep = _epoll()
        self._streams: dict[int, tuple[Stream, Waiter, Callable[[], tuple[bytes, float]]]] = {}
        # ref=False: a reader with nothing to read keeps no event loop from exiting
        self._watcher = self.hub.loop.io(self._ep.fileno(), _EPOLLIN, ref=False)
        self._greenlet: gevent.Greenlet | None = None
        self.wakeups = 0

    @classmethod
    def current(cls) -> Reader | None:
        """This thread's reader (None where epoll is not)."""
        if not AVAILABLE:
            return None
        hub = gevent.get_hub()
        reader = _readers.get(hub)
        if reader is None:
            reader = _readers[hub] = cls()
        return reader

    def follow(self, fd: int, stream: Stream) -> None:
        waiter = Waiter(self.hub)
        self._streams[fd] = (stream, waiter, stream.read)
        self._ep.register(fd, _EPOLLIN)
        try:
            if self._greenlet is None or self._greenlet.dead:
                self._greenlet = gevent.spawn(self._run)
            failure = waiter.get()
        finally:
            self._drop(fd, stream)
        if failure is not None:
            raise failure

    def _drop(self, fd: int, stream: Stream) -> bool:
        """Stop reading `stream` (unless it was no longer read: False)."""
        entry = self._streams.get(fd)
        if entry is None or entry[0] is not stream:
            return False
        del self._streams[fd]
        self._ep.unregister(fd)
        return True

    def _run(self) -> None:
        wait, watcher, poll, streams = self.hub.wait, self._watcher, self._ep.poll, self._streams
        sleep, gather = gevent.sleep, self.gather_s
        while streams:
            wait(watcher)
            sleep(gather)
            self.wakeups += 1
            # each ready socket read and its bytes handed on at once: its reads carry their own stamps
            for fd, _ in poll(0):
                entry = streams.get(fd)
                if entry is None:
                    continue
                stream = entry[0]
                try:
                    data, t = entry[2]()
                    if not stream.take(data, t):
                        continue
                    failure = None
                except BlockingIOError:
                    continue
                except Exception as e:  # noqa: BLE001  (raised in the stream's own greenlet)
                    failure = e
                self._end(fd, stream, entry[1], failure)

    def _end(self, fd: int, stream: Stream, waiter: Waiter, failure: BaseException | None) -> None:
        if self._drop(fd, stream):
            stream.ended()
            self.hub.loop.run_callback(_wake, waiter, failure)


def _wake(waiter: Waiter, failure: BaseException | None) -> None:
    waiter.switch(failure)
