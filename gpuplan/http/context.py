"""What the HTTP face is handed by the process that serves it: the warm service parts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from contract.records import ApiToken, Job
from gpuplan.app.adapters.executors import Executor
from gpuplan.app.core.bridge import floor_hour
from gpuplan.app.core.config import ServiceConfig
from gpuplan.app.core.forecasters import Forecasters
from gpuplan.app.core.ports import HeldQueue
from gpuplan.app.core.tokens import TokenCache, authenticate, sha256_hex
from gpuplan.app.cycle.finish import cancel
from gpuplan.app.cycle.traffic import Stored, SurgeAnswer, answer_surge, push_traffic
from gpuplan.app.jobs.batcher import SubmitBatcher
from gpuplan.app.jobs.changes import Changes, FreshMarks, Mirror, ReadCache
from gpuplan.app.jobs.submit import SubmitResult, checked_spec, estimated_job, submit, with_quota_note
from gpuplan.app.views.dashboard import dashboard
from gpuplan.app.views.health import Health
from gpuplan.app.views.status import Beside, QueueRows, Status, checked_pool, read_beside, status
from storage.store import Store, revoked_tokens

T = TypeVar("T")


@dataclass
class ApiContext:
    """The store, config, executor and forecasters of the serving process, its clock, the
    plan lock it shares with the daemon's cycle, and the changes it shares with the cycle
    (the plan the cycle stored last, which the submits start from)."""

    store: Store
    config: ServiceConfig
    executor: Executor
    forecasters: Forecasters
    clock: Callable[[], datetime]
    plan_lock: Callable[[], AbstractContextManager[None]]
    health: Health
    changes: Changes = field(default_factory=Changes)
    #: Where a spec with a ``slurm:`` section is submitted held (None: such a spec is refused).
    held: HeldQueue | None = None
    max_body_bytes: int = 64 * 1024
    batcher: SubmitBatcher = field(init=False)
    marks: FreshMarks = field(init=False)
    reads: ReadCache = field(init=False)
    tokens: TokenCache = field(init=False)
    queue_rows: QueueRows = field(init=False, default_factory=QueueRows)
    _beside: tuple[Hashable, Beside] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.batcher = SubmitBatcher(
            self.store,
            config=self.config,
            forecasters=self.forecasters,
            clock=self.clock,
            plan_lock=self.plan_lock,
            changes=self.changes,
        )
        self.marks = FreshMarks(self.store.marks)
        self.reads = ReadCache(self.store.marks, self.changes)
        self.tokens = TokenCache(self.store)

    def authenticate(self, secret: str | None, marks: tuple[int, ...]) -> ApiToken:
        """The live token of a request's bearer secret, found by hash in memory while ``marks``
        (the store's as of the request, :class:`FreshMarks`) count no new revocation."""
        revoked = revoked_tokens(marks)
        return authenticate(self.store, secret, lambda digest: self.tokens.lookup(digest, revoked))

    async def caller(self, secret: str | None, marks: tuple[int, ...]) -> ApiToken:
        """:meth:`authenticate` in the event loop: a token kept in memory is checked there, any
        other looked up in a worker thread."""
        known = self.tokens.known(sha256_hex(secret), revoked_tokens(marks)) if secret else None
        if known is None:
            return await run_in_threadpool(self.authenticate, secret, marks)
        return authenticate(self.store, secret, lambda _: known)

    def submit(self, token: ApiToken, document: object, *, source: str) -> SubmitResult:
        """The submit use case as this token's team (the page, in a worker thread); the
        submits that arrive together are stored in one transaction and planned once, under the
        plan lock (:class:`SubmitBatcher`)."""
        now = self.clock()
        return submit(
            self.store,
            document,
            now,
            self.config,
            source=source,
            default_id=_default_id(token, now),
            forecasters=self.forecasters,
            token=token,
            batcher=self.batcher.submit,
            held=self.held,
        )

    async def served_submit(self, token: ApiToken, document: object, *, source: str) -> SubmitResult:
        """:meth:`submit` in the event loop: the spec checked and forecast there, then its batch
        awaited; a spec with a ``slurm:`` section is submitted by :meth:`submit` in a worker
        thread (``sbatch``)."""
        now = self.clock()
        spec, section = checked_spec(
            document,
            self.held,
            source=source,
            default_id=_default_id(token, now),
            token=token,
            pools=self.config.pools,
            team_names=[team.name for team in self.config.teams],
        )
        if section is not None:
            return await run_in_threadpool(self.submit, token, document, source=source)
        job = estimated_job(spec, now, self.forecasters, source=source, token=token, pools=self.config.pools)
        result = await asyncio.wrap_future(self.batcher.queue(job, source=source))
        if not self.config.teams or job.team is None:
            return result
        return await run_in_threadpool(with_quota_note, result, job, self.store, self.config)

    def push_traffic(
        self, app: str, rows: Sequence[tuple[datetime, float]]
    ) -> tuple[Stored, SurgeAnswer | None]:
        """Store pushed hours; a count of the hour in progress that outruns the app's GPUs is a
        surge, answered at once under the plan lock (a re-plan that amends the hour)."""
        now = self.clock()
        try:
            stored = push_traffic(self.store, app, rows, now)
            if stored.observed is None:
                return stored, None
            with self.plan_lock():
                surge = answer_surge(
                    self.store, now, self.config, self.executor, forecasters=self.forecasters
                )
            if surge is not None:  # the re-plan is a cycle: /healthz (and the page's reload) count it
                self.health.record(now, None)
            return stored, surge
        finally:
            self.changes.bump()

    def cancel(self, token: ApiToken, job_id: str) -> Job:
        job = cancel(self.store, job_id, self.clock(), self.executor, token=token)
        self.changes.bump()
        return job

    def cached(self, key: Hashable, build: Callable[[], T], marks: tuple[int, ...] | None = None) -> T:
        """A read rebuilt once per change (:class:`gpuplan.app.jobs.changes.ReadCache`); ``marks``:
        the store's as of the request, when it has them already."""
        return self.reads.get(key, build, marks)

    def status(self, team: str | None) -> dict[str, Any]:
        """``status --json``'s document as of the last change, ``at`` now."""
        result: dict[str, Any] = json.loads(self.status_json(team))
        return result

    def status_json(self, team: str | None, marks: tuple[int, ...] | None = None) -> bytes:
        """:meth:`status` as JSON: the document is encoded once per change (a queue of a thousand
        jobs takes longer to encode than to serve), and ``at`` put in front of it per request."""
        now = self.clock()
        return _at(now, self._status_rest(team, now, self.store.marks() if marks is None else marks))

    async def served_status(
        self,
        team: str | None,
        marks: tuple[int, ...],
        page: tuple[int, int] | None = None,
        pool: str | None = None,
    ) -> tuple[bytes, int]:
        """:meth:`status_json` in the event loop, its queue cut to ``page`` (offset, limit;
        None: whole), and the queue's whole length: from memory when nothing changed since it
        was built, else built in a worker thread, once for all the requests that ask meanwhile.
        ``pool``: that pool's rows only (InputError naming ``pool`` for one the config lacks)."""
        now = self.clock()
        checked_pool(pool, self.config.pools)
        key = (_status_key(team, now), page, pool)
        build = self._status_page_build(team, now, marks, page, pool)
        body, total = await self.reads.served(key, build, marks)
        return _at(now, body), total

    def _status_rest(self, team: str | None, now: datetime, marks: tuple[int, ...]) -> bytes:
        """The status document without ``at``, as of ``marks``, built once per change."""
        return self.cached(_status_key(team, now), self._status_build(team, now, marks), marks)

    def _status_build(self, team: str | None, now: datetime, marks: tuple[int, ...]) -> Callable[[], bytes]:
        """The build of a team's status document: the whole status is built once per change
        (:meth:`_whole_status`) and each team's filtered from it, so fifty teams reading after
        a change cost one build and fifty filters, not fifty builds."""

        def build() -> bytes:
            return self._whole_status(now, marks).of_team(team).text_without_at(self.queue_rows).encode()

        return build

    def _status_page_build(
        self,
        team: str | None,
        now: datetime,
        marks: tuple[int, ...],
        page: tuple[int, int] | None,
        pool: str | None = None,
    ) -> Callable[[], tuple[bytes, int]]:
        """:meth:`_status_build` of ``pool``'s rows, the queue cut to ``page``, and the queue's length."""

        def build() -> tuple[bytes, int]:
            whole = self._whole_status(now, marks).of_team(team).of_pool(pool)
            shown = whole if page is None else replace(whole, queue=whole.queue[page[0] : page[0] + page[1]])
            return shown.text_without_at(self.queue_rows).encode(), len(whole.queue)

        return build

    def _whole_status(self, now: datetime, marks: tuple[int, ...]) -> Status:
        def build() -> Status:
            mirror = self.changes.mirror_at(self.store, marks)
            beside = self._beside_of(mirror, now)
            known = (mirror.jobs, mirror.run)
            return status(
                self.store,
                now,
                known=known,
                rows=self.queue_rows,
                beside=beside,
                pools=self.config.pools,
                teams=self.config.teams,
                half_life_days=self.config.half_life_days,
            )

        return self.cached(("whole status", floor_hour(now)), build, marks)

    def _beside_of(self, mirror: Mirror, now: datetime) -> Beside:
        """What the status reads beside the jobs and runs (:class:`Beside`), read once per
        read of the queue that ``mirror`` grew from, and per hour (the commit it shows is the
        latest up to the hour)."""
        key = (mirror.root, floor_hour(now))
        kept = self._beside
        if kept is None or kept[0] != key:
            kept = self._beside = (key, read_beside(self.store, now, self.config.pools))
        return kept[1]

    def dashboard(self) -> dict[str, Any]:
        """The dashboard's data as of the last change, with the clock and health of now."""
        now = self.clock()
        page = self.cached(
            ("dashboard", floor_hour(now)),
            lambda: dashboard(
                self.store,
                now,
                self.health,
                self.config.pools,
                teams=self.config.teams,
                half_life_days=self.config.half_life_days,
            ),
        )
        return {**page, "now": now, "health": self.health.as_dict()}


def _status_key(team: str | None, now: datetime) -> Hashable:
    return ("status", team, floor_hour(now))


def _at(now: datetime, document: bytes) -> bytes:
    """A JSON object with ``at`` (now) put first."""
    return b'{"at":' + json.dumps(now.isoformat()).encode() + b"," + document[1:]


def _default_id(token: ApiToken, now: datetime) -> str:
    """The id of a job submitted without one: its team and the moment."""
    return f"{token.team}-{now:%Y%m%dT%H%M%S%f}"
