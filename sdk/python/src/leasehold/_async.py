"""The asyncio client: operations run over asyncio streams, one HTTP/1.1
exchange per connection."""

from __future__ import annotations

import asyncio
import datetime
import sys
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Mapping, Sequence, TypeVar

from . import _operations as ops
from ._config import Base, Config
from ._protocol import Duration, Emit, Event, Open, Operation, Request, Response, Runner, Send, Sleep, watch
from .types import BatchItem, Child, Job, Limit, Queue, Schedule, Usage

T = TypeVar("T")

# The longest line of a response head that is read.
_LINE_LIMIT = 1 << 16


async def _within(step: Awaitable[T], timeout: float) -> T:
    """Awaits step for at most timeout seconds. Not asyncio.wait_for where
    asyncio.timeout exists (3.11): wait_for before 3.12 may swallow a
    cancellation that comes as step ends, and a cancelled watch would go on."""
    if sys.version_info < (3, 11):
        return await asyncio.wait_for(step, timeout)
    async with asyncio.timeout(timeout):
        return await step


class _Malformed(Exception):
    """The server's answer is not HTTP/1.1 as this client reads it."""


# What a connection that broke, timed out or never came raises.
_BROKEN = (OSError, EOFError, asyncio.TimeoutError, ValueError, _Malformed)


class _Exchange:
    """One request and its answer, on a connection of its own."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self._reader, self._writer, self._timeout = reader, writer, timeout
        self._buf = b""
        self._chunked = False
        self._remaining: int | None = None  # body bytes left, when known
        self._done = False
        self.status = 0
        self.headers: dict[str, str] = {}

    @classmethod
    async def start(cls, config: Config, request: Request, timeout: float) -> _Exchange:
        """Sends request and reads the answer's head."""
        reader, writer = await _within(
            asyncio.open_connection(config.host, config.port, ssl=config.ssl_context, limit=_LINE_LIMIT), timeout
        )
        ex = cls(reader, writer, timeout)
        try:
            writer.write(_head(config, request))
            await ex._within(writer.drain())
            await ex._read_head(request.method)
        except BaseException:
            ex.close()
            raise
        return ex

    def close(self) -> None:
        self._writer.close()

    async def _within(self, step: Awaitable[T]) -> T:
        return await _within(step, self._timeout)

    async def _read_head(self, method: str) -> None:
        status = (await self._within(self._reader.readline())).split(None, 2)
        if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not status[1].isdigit():
            raise _Malformed(f"status line {b' '.join(status)!r}")
        self.status = int(status[1])
        while (line := await self._within(self._reader.readline())) not in (b"\r\n", b"\n"):
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise _Malformed(f"header line {line!r}")
            name, value = name.strip().lower(), value.strip()
            self.headers[name] = f"{self.headers[name]}, {value}" if name in self.headers else value
        if method == "HEAD" or self.status in (204, 304):
            self._done = True
        elif "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif "content-length" in self.headers:
            self._remaining = int(self.headers["content-length"])

    async def _piece(self) -> bytes:
        """The body's next bytes; b"" at its end."""
        if self._done:
            return b""
        if self._chunked:
            size = int((await self._within(self._reader.readline())).split(b";", 1)[0], 16)
            if size == 0:
                while (await self._within(self._reader.readline())) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self._done = True
                return b""
            return (await self._within(self._reader.readexactly(size + 2)))[:-2]
        if self._remaining is None:  # the body ends with the connection
            data = await self._within(self._reader.read(1 << 16))
            self._done = not data
            return data
        if self._remaining == 0:
            self._done = True
            return b""
        data = await self._within(self._reader.read(min(self._remaining, 1 << 16)))
        if not data:
            raise _Malformed(f"connection closed {self._remaining} bytes before the body's end")
        self._remaining -= len(data)
        return data

    async def read(self) -> bytes:
        parts = [self._buf]
        while piece := await self._piece():
            parts.append(piece)
        self._buf = b""
        return b"".join(parts)

    async def readline(self) -> bytes:
        while (end := self._buf.find(b"\n")) < 0:
            piece = await self._piece()
            if not piece:
                line, self._buf = self._buf, b""
                return line
            self._buf += piece
        line, self._buf = self._buf[: end + 1], self._buf[end + 1 :]
        return line


def _head(config: Config, request: Request) -> bytes:
    body = request.encoded() or b""
    host = f"[{config.host}]" if ":" in config.host else config.host
    if config.port != (443 if config.scheme == "https" else 80):
        host = f"{host}:{config.port}"
    lines = [f"{request.method} {request.target(config.base_path)} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in config.headers(request).items()]
    if request.body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class AsyncClient(Base):
    """An asyncio client of the Leasehold API: :class:`leasehold.Client`'s
    methods, awaitable; ``list``, ``schedules`` and ``watch`` are async
    iterators. Cancelling a task closes its connection."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing to release: each call has its own connection."""

    # Jobs

    async def submit(self, kind: str, input: Any = None, *, idempotency_key: str | None = None, **fields: Any) -> Job:
        return await self._result(ops.submit(self._policy, kind, input, idempotency_key, fields))

    async def batch(self, jobs: Sequence[Mapping[str, Any]]) -> list[BatchItem]:
        return await self._result(ops.batch(self._policy, jobs))

    async def get(self, job_id: str, *, wait: Duration | None = None) -> Job:
        return await self._result(ops.get(self._policy, job_id, wait))

    def list(self, *, page_size: int | None = None, **filters: Any) -> AsyncIterator[Job]:
        return self._run(ops.list_jobs(self._policy, filters, page_size))

    async def cancel(self, job_id: str) -> Job:
        return await self._result(ops.cancel(self._policy, job_id))

    async def retry(self, job_id: str) -> Job:
        return await self._result(ops.retry(self._policy, job_id))

    async def delete(self, job_id: str) -> None:
        await self._result(ops.delete(self._policy, job_id))

    async def signal(self, job_id: str, name: str, data: Any = None) -> Job:
        return await self._result(ops.signal(self._policy, job_id, name, data))

    def watch(self, job_id: str, *, last_event_id: str | None = None) -> AsyncIterator[Event]:
        return self._run(watch(self._policy, job_id, last_event_id))

    # Runs (API v1.2)

    async def steps(self, job_id: str) -> dict[str, Any]:
        return await self._result(ops.steps(self._policy, job_id))

    def children(self, job_id: str, *, state: str | None = None, page_size: int | None = None) -> AsyncIterator[Child]:
        return self._run(ops.children(self._policy, job_id, state, page_size))

    async def run(self, job_id: str) -> dict[str, Any]:
        return await self._result(ops.run(self._policy, job_id))

    # Queues, limits, usage

    async def queues(self) -> list[Queue]:
        return await self._result(ops.queues(self._policy))

    async def pause_queue(self, name: str) -> Queue:
        return await self._result(ops.pause_queue(self._policy, name, True))

    async def resume_queue(self, name: str) -> Queue:
        return await self._result(ops.pause_queue(self._policy, name, False))

    async def limits(self) -> list[Limit]:
        return await self._result(ops.limits(self._policy))

    async def set_limit(self, key: str, **fields: Any) -> Limit:
        return await self._result(ops.set_limit(self._policy, key, fields))

    async def update_limit(self, key: str, **fields: Any) -> Limit:
        return await self._result(ops.update_limit(self._policy, key, fields))

    async def delete_limit(self, key: str) -> None:
        await self._result(ops.delete_limit(self._policy, key))

    async def usage(self, start: datetime.date | str, end: datetime.date | str, *, tenant: str | None = None) -> Usage:
        return await self._result(ops.usage(self._policy, start, end, tenant))

    # Schedules

    async def create_schedule(self, name: str, cron: str, job: Mapping[str, Any], **fields: Any) -> Schedule:
        return await self._result(ops.create_schedule(self._policy, name, cron, job, fields))

    def schedules(self, *, page_size: int | None = None) -> AsyncIterator[Schedule]:
        return self._run(ops.list_schedules(self._policy, page_size))

    async def get_schedule(self, name: str) -> Schedule:
        return await self._result(ops.get_schedule(self._policy, name))

    async def delete_schedule(self, name: str) -> None:
        await self._result(ops.delete_schedule(self._policy, name))

    async def pause_schedule(self, name: str) -> Schedule:
        return await self._result(ops.pause_schedule(self._policy, name, True))

    async def resume_schedule(self, name: str) -> Schedule:
        return await self._result(ops.pause_schedule(self._policy, name, False))

    async def trigger_schedule(self, name: str) -> Job:
        return await self._result(ops.trigger_schedule(self._policy, name))

    # The driver

    async def _result(self, op: Operation) -> Any:
        run = self._run(op)
        try:
            return await run.__anext__()
        finally:
            await run.aclose()

    async def _run(self, op: Operation) -> AsyncGenerator[Any, None]:
        """Runs op, yielding what it emits."""
        run, stream = Runner(op), None
        try:
            while (action := run.next()) is not None:
                if isinstance(action, Emit):
                    yield action.value
                    continue
                try:
                    if isinstance(action, Sleep):
                        await asyncio.sleep(action.seconds)
                    elif isinstance(action, Send):
                        run.reply = await self._send(action.request)
                    elif isinstance(action, Open):
                        if stream is not None:
                            stream.close()
                        stream, run.reply = await self._open(action.request)
                    else:
                        assert stream is not None, "ReadLine before Open"
                        run.reply = await stream.readline()
                except _BROKEN as e:
                    run.broke(e)
        finally:
            if stream is not None:
                stream.close()
            run.close()

    async def _send(self, request: Request) -> Response:
        ex = await _Exchange.start(self._config, request, self._config.timeout + request.hold)
        try:
            return Response(ex.status, ex.headers, await ex.read())
        finally:
            ex.close()

    async def _open(self, request: Request) -> tuple[_Exchange | None, Response]:
        ex = await _Exchange.start(self._config, request, self._config.stream_timeout)
        if ex.status == 200:
            return ex, Response(ex.status, ex.headers)
        try:
            return None, Response(ex.status, ex.headers, await ex.read())
        finally:
            ex.close()
