"""What changed, and the reads rebuilt once per change: the serving process's memory of the store.

:class:`Changes` is a stamp this process moves at every change it makes (a cycle, a batch of
submits, a cancel, a traffic push, a recalibration, a poll), with the plan its last cycle
stored. :class:`ReadCache` keeps each read (the status, a report, the dashboard's data) until
the stamp or the store's :meth:`~storage.store.Store.marks` move: the stamp moves before a
change is answered, and the marks move with any process's runs, jobs, commits, amendments
and token revocations, so a reader never gets a document older than a change already
answered. :class:`FreshMarks` reads the marks once for all the requests that ask together.
A :class:`Mirror` holds the queued and running jobs and the latest run as of some marks: a
batch of submits extends the one it started from, so that the status after it is rebuilt
from memory, not from a read of the whole queue.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from contract.records import Job, JobState, PlanRun
from storage.store import Store

T = TypeVar("T")

#: Distinct reads kept (status per team, reports per query); the oldest go first beyond it.
MAX_ENTRIES = 256


@dataclass(frozen=True)
class CyclePlan:
    """The plan a cycle stored, with the store's marks right after it and the stamp it set."""

    run: PlanRun
    marks: tuple[int, ...]
    stamp: int


#: How many earlier marks a mirror remembers that it has grown from.
MIRROR_SINCE = 8


@dataclass(frozen=True)
class Mirror:
    """The queued and running jobs (in submission order) and the latest run, as the store
    holds them while its marks are ``marks``; ``since``: the marks of the mirrors it grew
    from by this process's batches alone (a reader that saw those may have this one: it
    holds every change the reader's marks did, and only this process's since)."""

    marks: tuple[int, ...]
    jobs: tuple[Job, ...]
    run: PlanRun | None
    since: tuple[tuple[int, ...], ...] = ()
    read_at: tuple[int, ...] | None = None  # the marks it was read from the store at (None: ``marks``)

    @property
    def root(self) -> tuple[int, ...]:
        """The marks of the read this mirror grew from: since then the store moved by this
        process's batches of submits alone, so whatever they leave alone (the commits, the
        apps, the leading daemon) is as that read found it."""
        return self.marks if self.read_at is None else self.read_at

    def extended(self, marks: tuple[int, ...], jobs: tuple[Job, ...], run: PlanRun) -> Mirror:
        """This mirror after ``jobs`` were queued and ``run`` stored, and nothing else, leaving
        the store at ``marks``."""
        since = (*self.since, self.marks)[-MIRROR_SINCE:]
        return Mirror(marks, self.jobs + jobs, run, since, self.root)


class Changes:
    """A stamp moved at every change this process makes, the last cycle's plan, and the
    mirror of the queue this process knows to hold (:class:`Mirror`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamp = 0
        self._cycle_plan: CyclePlan | None = None
        self._listeners: list[Callable[[], None]] = []
        self.mirror: Mirror | None = None

    def mirror_at(self, store: Store, marks: tuple[int, ...]) -> Mirror:
        """The queue as of ``marks`` (the store's, read before) or later: the mirror kept, when
        it is of these marks or grew from them; else read from the store, and kept when the
        marks did not move meanwhile (when they did, what was read is newer than ``marks``,
        which a reader may have)."""
        mirror = self.mirror
        if mirror is not None and (mirror.marks == marks or marks in mirror.since):
            return mirror
        mirror = Mirror(marks, tuple(store.jobs([JobState.QUEUED, JobState.RUNNING])), store.run())
        if store.marks() == marks:
            self.mirror = mirror
        return mirror

    @property
    def stamp(self) -> int:
        return self._stamp

    @property
    def cycle_plan(self) -> CyclePlan | None:
        return self._cycle_plan

    def bump(self) -> int:
        """A change was made (call it before the change is answered); returns the new stamp."""
        with self._lock:
            self._stamp += 1
            stamp = self._stamp
        self._tell()
        return stamp

    def planned(self, run: PlanRun, marks: tuple[int, ...]) -> None:
        """A cycle stored ``run``; ``marks`` are the store's right after (under the plan lock)."""
        with self._lock:
            self._stamp += 1
            self._cycle_plan = CyclePlan(run, marks, self._stamp)
        self._tell()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each change from now on (:meth:`bump`, :meth:`planned`), in
        the thread that made it, which may hold the plan lock: it must hand its work to a
        thread of its own."""
        self._listeners.append(listener)

    def _tell(self) -> None:
        for listener in self._listeners:
            listener()


class FreshMarks:
    """The store's marks for the event loop's requests, read by a query that began after the
    request asked (so they show every change committed before it asked), one query in a worker
    thread for all the requests that ask meanwhile: under load the requests that arrive
    together share one round trip (a group read), and none waits in a thread of its own.

    One query runs at a time. A request that asks while none runs begins one; the requests
    that ask while one runs wait for the next, begun as soon as it ends."""

    def __init__(self, read: Callable[[], tuple[int, ...]]) -> None:
        self.read = read  # the store's marks
        self._running: asyncio.Future[tuple[int, ...]] | None = None  # the query's answer
        self._next: asyncio.Future[tuple[int, ...]] | None = None  # the next one's, awaited
        self.reads = 0  # queries made, and requests waiting for the next one (the tests count them)
        self.waiting = 0

    async def __call__(self) -> tuple[int, ...]:
        loop = asyncio.get_running_loop()
        if self._running is None:
            group = self._begin(loop, loop.create_future())
        else:
            if self._next is None:
                self._next = loop.create_future()
            group = self._next
            self.waiting += 1
        # shielded: a request that goes away does not cancel the others' answer
        return await asyncio.shield(group)

    def _begin(
        self, loop: asyncio.AbstractEventLoop, group: asyncio.Future[tuple[int, ...]]
    ) -> asyncio.Future[tuple[int, ...]]:
        self._running = group
        query = loop.run_in_executor(None, self.read)

        def ended(query: asyncio.Future[tuple[int, ...]]) -> None:
            self.reads += 1
            self._running = None
            error = query.exception()
            if error is None:
                group.set_result(query.result())
            else:  # every request of the group fails; the next group queries again
                group.set_exception(error)
            waiting, self._next = self._next, None
            if waiting is not None:
                self.waiting = 0
                self._begin(loop, waiting)

        query.add_done_callback(ended)
        return group


class ReadCache:
    """Reads served from memory, each rebuilt once after a change (see the module's docstring).

    Readers that find the same read stale together wait for one build of it (single flight):
    under load a change is followed by one rebuild, not one per reader.
    """

    def __init__(self, marks: Callable[[], tuple[int, ...]], changes: Changes) -> None:
        self.marks = marks
        self.changes = changes
        self._lock = threading.Condition()
        self._entries: dict[Hashable, tuple[tuple[Any, ...], Any]] = {}
        self._building: set[tuple[Hashable, tuple[Any, ...]]] = set()
        self._flights: dict[tuple[Hashable, tuple[Any, ...]], asyncio.Future[Any]] = {}  # served()
        self.builds = 0  # how many reads were rebuilt (the tests count them)

    async def served(self, key: Hashable, build: Callable[[], T], marks: tuple[int, ...]) -> T:
        """:meth:`get` for the event loop: from memory, without a thread, when nothing changed
        since the value was built; else :meth:`get` in a worker thread, once for all the
        requests that ask meanwhile (they await the same build)."""
        version = (self.changes.stamp, marks)
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry[0] == version:
            value: T = entry[1]
            return value
        flight = (key, version)
        future = self._flights.get(flight)
        if future is None:
            future = asyncio.get_running_loop().run_in_executor(None, self.get, key, build, marks)
            self._flights[flight] = future
            future.add_done_callback(lambda _: self._flights.pop(flight, None))
        # shielded: a request that goes away does not cancel the others' answer
        built: T = await asyncio.shield(future)
        return built

    def get(self, key: Hashable, build: Callable[[], T], marks: tuple[int, ...] | None = None) -> T:
        """The cached value of ``key``, or ``build()``'s when anything changed since it was built.
        ``marks``: the store's, read after the request arrived (by default read now)."""
        # Taken before the build: a change made while it builds leaves an entry already stale.
        version = (self.changes.stamp, self.marks() if marks is None else marks)
        with self._lock:
            while True:
                entry = self._entries.get(key)
                if entry is not None and entry[0] == version:
                    value: T = entry[1]
                    return value
                if (key, version) not in self._building:
                    self._building.add((key, version))
                    break
                self._lock.wait()
        try:
            value = build()
            with self._lock:
                self.builds += 1
                self._entries.pop(key, None)
                self._entries[key] = (version, value)
                while len(self._entries) > MAX_ENTRIES:
                    del self._entries[next(iter(self._entries))]
            return value
        finally:
            with self._lock:
                self._building.discard((key, version))
                self._lock.notify_all()
