"""The blocking client: operations run over http.client."""

from __future__ import annotations

import datetime
import http.client
import time
from typing import Any, Generator, Iterator, Mapping, Sequence

from . import _operations as ops
from ._config import Base
from ._protocol import Duration, Emit, Event, Open, Operation, Request, Response, Runner, Send, Sleep, watch
from .types import BatchItem, Child, Job, Limit, Queue, Schedule, Usage

# What a connection that broke or never came raises.
_BROKEN = (OSError, http.client.HTTPException)


class _Stream:
    """An open event stream."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self.conn, self.response = conn, response

    def close(self) -> None:
        self.conn.close()


class Client(Base):
    """A blocking client of the Leasehold API, safe to share between threads.

    url and key default to the environment's ``LEASEHOLD_URL`` and
    ``LEASEHOLD_KEY``. Idempotent calls (reads, cancel, delete, schedule
    writes, and submit with an ``idempotency_key``) are sent again after a
    429 or 503, waiting as ``Retry-After`` asks, at most ``max_retries``
    times; other calls raise at once. Errors are subclasses of
    :class:`leasehold.errors.LeaseholdError`.
    """

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release: each call has its own connection."""

    # Jobs

    def submit(self, kind: str, input: Any = None, *, idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submits a job (POST /v1/jobs). fields are the submission's other
        members (queue, concurrency_keys, priority, max_attempts, timeout,
        max_wait, delay, on_busy, metadata, cost, webhook, ...); durations
        may be Go duration strings, seconds or timedeltas."""
        return self._result(ops.submit(self._policy, kind, input, idempotency_key, fields))

    def batch(self, jobs: Sequence[Mapping[str, Any]]) -> list[BatchItem]:
        """Submits up to 1000 jobs at once; each item may carry an
        ``idempotency_key``. One entry per item, in order."""
        return self._result(ops.batch(self._policy, jobs))

    def get(self, job_id: str, *, wait: Duration | None = None) -> Job:
        """Reads a job; with wait (at most 60 s), once it has ended or the
        wait is over."""
        return self._result(ops.get(self._policy, job_id, wait))

    def list(self, *, page_size: int | None = None, **filters: Any) -> Iterator[Job]:
        """Iterates over the caller's jobs, newest first, page after page.
        filters: state, kind, queue, tenant (admin)."""
        return self._run(ops.list_jobs(self._policy, filters, page_size))

    def cancel(self, job_id: str) -> Job:
        return self._result(ops.cancel(self._policy, job_id))

    def retry(self, job_id: str) -> Job:
        """Runs an ended (failed, cancelled or expired) job again."""
        return self._result(ops.retry(self._policy, job_id))

    def delete(self, job_id: str) -> None:
        """Forgets an ended job."""
        self._result(ops.delete(self._policy, job_id))

    def signal(self, job_id: str, name: str, data: Any = None) -> Job:
        """Sends a named signal to a job that waits, or will wait, for it."""
        return self._result(ops.signal(self._policy, job_id, name, data))

    def watch(self, job_id: str, *, last_event_id: str | None = None) -> Iterator[Event]:
        """Iterates over the job's events until its terminal state event,
        resuming across broken connections without losing or repeating one."""
        return self._run(watch(self._policy, job_id, last_event_id))

    # Runs (API v1.2)

    def steps(self, job_id: str) -> dict[str, Any]:
        """The steps the job's executions recorded, by name."""
        return self._result(ops.steps(self._policy, job_id))

    def children(self, job_id: str, *, state: str | None = None, page_size: int | None = None) -> Iterator[Child]:
        """Iterates over the jobs the job spawned, oldest first, as
        ``{"key", "job"}``."""
        return self._run(ops.children(self._policy, job_id, state, page_size))

    def run(self, job_id: str) -> dict[str, Any]:
        """The run under the job: its jobs by state, executions, usage and
        spend."""
        return self._result(ops.run(self._policy, job_id))

    # Queues, limits, usage

    def queues(self) -> list[Queue]:
        return self._result(ops.queues(self._policy))

    def pause_queue(self, name: str) -> Queue:
        """Stops claims from a queue (admin); returns the queue."""
        return self._result(ops.pause_queue(self._policy, name, True))

    def resume_queue(self, name: str) -> Queue:
        return self._result(ops.pause_queue(self._policy, name, False))

    def limits(self) -> list[Limit]:
        return self._result(ops.limits(self._policy))

    def set_limit(self, key: str, **fields: Any) -> Limit:
        """Sets a key's whole configuration (admin): limit, rpm, tpm,
        adaptive, per_tenant; a field left out is removed."""
        return self._result(ops.set_limit(self._policy, key, fields))

    def update_limit(self, key: str, **fields: Any) -> Limit:
        """Changes the fields named of a key's configuration (admin), a
        JSON merge patch: None removes a field, a field left out stays."""
        return self._result(ops.update_limit(self._policy, key, fields))

    def delete_limit(self, key: str) -> None:
        self._result(ops.delete_limit(self._policy, key))

    def usage(self, start: datetime.date | str, end: datetime.date | str, *, tenant: str | None = None) -> Usage:
        """Counts per UTC day from start to end, both included."""
        return self._result(ops.usage(self._policy, start, end, tenant))

    # Schedules

    def create_schedule(self, name: str, cron: str, job: Mapping[str, Any], **fields: Any) -> Schedule:
        """Creates a schedule; fields: timezone, overlap. The same name
        with the same body answers the schedule again."""
        return self._result(ops.create_schedule(self._policy, name, cron, job, fields))

    def schedules(self, *, page_size: int | None = None) -> Iterator[Schedule]:
        return self._run(ops.list_schedules(self._policy, page_size))

    def get_schedule(self, name: str) -> Schedule:
        return self._result(ops.get_schedule(self._policy, name))

    def delete_schedule(self, name: str) -> None:
        self._result(ops.delete_schedule(self._policy, name))

    def pause_schedule(self, name: str) -> Schedule:
        return self._result(ops.pause_schedule(self._policy, name, True))

    def resume_schedule(self, name: str) -> Schedule:
        return self._result(ops.pause_schedule(self._policy, name, False))

    def trigger_schedule(self, name: str) -> Job:
        """Fires a schedule once now; returns the job it created."""
        return self._result(ops.trigger_schedule(self._policy, name))

    # The driver

    def _result(self, op: Operation) -> Any:
        run = self._run(op)
        try:
            return next(run)
        finally:
            run.close()

    def _run(self, op: Operation) -> Generator[Any, None, None]:
        """Runs op, yielding what it emits."""
        run, stream = Runner(op), None
        try:
            while (action := run.next()) is not None:
                if isinstance(action, Emit):
                    yield action.value
                    continue
                try:
                    if isinstance(action, Sleep):
                        time.sleep(action.seconds)
                    elif isinstance(action, Send):
                        run.reply = self._send(action.request)
                    elif isinstance(action, Open):
                        if stream is not None:
                            stream.close()
                        stream, run.reply = self._open(action.request)
                    else:
                        assert stream is not None, "ReadLine before Open"
                        run.reply = stream.response.readline()
                except _BROKEN as e:
                    run.broke(e)
        finally:
            if stream is not None:
                stream.close()
            run.close()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        c = self._config
        if c.scheme == "https":
            return http.client.HTTPSConnection(c.host, c.port, timeout=timeout, context=c.ssl_context)
        return http.client.HTTPConnection(c.host, c.port, timeout=timeout)

    def _request(self, conn: http.client.HTTPConnection, request: Request) -> http.client.HTTPResponse:
        target = request.target(self._config.base_path)
        conn.request(request.method, target, body=request.encoded(), headers=self._config.headers(request))
        return conn.getresponse()

    def _send(self, request: Request) -> Response:
        conn = self._connection(self._config.timeout + request.hold)
        try:
            r = self._request(conn, request)
            return Response(r.status, _headers(r), r.read())
        finally:
            conn.close()

    def _open(self, request: Request) -> tuple[_Stream | None, Response]:
        conn = self._connection(self._config.stream_timeout)
        try:
            r = self._request(conn, request)
            if r.status == 200:
                return _Stream(conn, r), Response(r.status, _headers(r))
            body = r.read()
        except BaseException:
            conn.close()
            raise
        conn.close()
        return None, Response(r.status, _headers(r), body)


def _headers(r: http.client.HTTPResponse) -> dict[str, str]:
    return {k.lower(): v for k, v in r.getheaders()}
