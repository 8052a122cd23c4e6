"""The handler framework: job kinds written as Python functions, served to
Leasehold's workers over the remote handler protocol (docs/handlers.md).

One ``App`` serves every kind registered on it at one URL: a call is routed
by its ``Leasehold-Kind`` header, so ``LEASEHOLD_HANDLERS`` names the same
URL for each kind.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import math
import threading
from typing import Any, Awaitable, Callable, Mapping, NamedTuple, NoReturn, Sequence, TypeVar, Union

from ._protocol import Duration, duration
from .errors import LeaseholdError

__all__ = ["App", "Context", "Fence", "Permanent", "Signal", "StaleToken"]

Handler = Callable[["Context"], Union[Any, Awaitable[Any]]]
H = TypeVar("H", bound=Handler)

# A request's head and body are the worker's: its input (at most 1 MiB)
# with a checkpoint (256 KiB) and a signal's data (64 KiB) beside it.
_MAX_HEAD = 64 << 10
_MAX_BODY = 4 << 20


class Signal(NamedTuple):
    """The signal that ended the job's last wait: ``data`` is None and
    ``timed_out`` True when the wait timed out instead."""

    name: str
    data: Any
    timed_out: bool


class Permanent(LeaseholdError):
    """Raised by a handler, fails the job without a retry: for a call that
    would fail the same way again (bad input). Any other exception fails
    the attempt, and the job is retried."""


class StaleToken(LeaseholdError):
    """A write carried a fencing token lower than one the resource has
    seen: a newer execution owns the job, and this one must stop."""

    def __init__(self, resource: str, token: int, highest: int) -> None:
        super().__init__(f"stale fencing token {token} for {resource!r}: highest seen is {highest}")
        self.resource, self.token, self.highest = resource, token, highest


class Fence:
    """Keeps the highest fencing token each resource has seen, in this
    process, and refuses a lower one: the check a downstream store makes
    before each write (Go's fencing.Memory). A store shared by several
    processes keeps the token beside its data instead, in the write's own
    transaction: ``UPDATE ... SET token = $t WHERE job = $j AND token <= $t``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._highest: dict[str, int] = {}

    def admit(self, resource: str, token: int) -> None:
        """Admits token for resource, which then refuses every lower token,
        or raises StaleToken. An equal token is the same owner again."""
        if not resource or token < 1:
            raise ValueError("a fenced write needs a resource name and a token from 1 up")
        with self._lock:
            highest = self._highest.get(resource, 0)
            if token < highest:
                raise StaleToken(resource, token, highest)
            self._highest[resource] = token


class _End(BaseException):
    """Ends the call without a result. Not an Exception: a handler's own
    ``except Exception`` lets it through, as it does asyncio's
    cancellation."""


class _Wait(_End):
    def __init__(self, line: dict[str, Any]) -> None:
        self.line = line


class _Pushback(_End):
    def __init__(self, head: bytes) -> None:
        self.head = head


class Context:
    """One call of a handler: one execution of a job.

    ``input`` is the job's input; ``last_checkpoint`` the last checkpoint
    the job saved (None before the first) and ``last_signal`` the Signal
    that ended its last wait (None when it never waited). ``deadline`` is
    when the worker closes the call (a timezone-aware datetime, or None).

    The methods that send (progress, output, log, checkpoint, report_usage)
    queue their line and return at once, from a coroutine or from a sync
    handler's thread. When the worker closes the call (cancel, a lost
    lease, the timeout, a shutdown) an async handler is cancelled at once;
    a sync one sees ``cancelled`` set, and its next send raises
    asyncio.CancelledError.
    """

    def __init__(self, headers: Mapping[str, str], body: Any, call: _Call) -> None:
        self.job_id = headers.get("leasehold-job-id", "")
        self.execution_id = headers.get("leasehold-execution-id", "")
        self.kind = headers.get("leasehold-kind", "")
        self.tenant = headers.get("leasehold-tenant", "")
        self.attempt = int(headers.get("leasehold-attempt", "1"))
        self.fencing_token = int(headers.get("fencing-token", "0"))
        self.traceparent: str | None = headers.get("traceparent")
        deadline = headers.get("leasehold-deadline")
        self.deadline = datetime.datetime.fromisoformat(deadline.replace("Z", "+00:00")) if deadline else None
        if headers.get("leasehold-resume"):
            # The body is an envelope: the input with what the job saved.
            self.input = body.get("input")
            self.last_checkpoint = body.get("checkpoint")
            signal = body.get("signal")
            self.last_signal = Signal(signal["name"], signal.get("data"), bool(signal.get("timed_out"))) if signal else None
        else:
            self.input, self.last_checkpoint, self.last_signal = body, None, None
        self.cancelled = call.closed
        self._call = call

    def progress(self, data: Mapping[str, Any]) -> None:
        """Sends a progress event: ``{"step": 3, "of": 10}``."""
        self._call.send({"event": "progress", "data": dict(data)})

    def output(self, text: str) -> None:
        """Sends an output event: text to show as it comes, such as a model's tokens."""
        self._call.send({"event": "output", "data": {"text": text}})

    def log(self, message: str, **fields: Any) -> None:
        """Sends a log event: ``{"message": message, **fields}``."""
        self._call.send({"event": "log", "data": {"message": message, **fields}})

    def checkpoint(self, value: Any) -> None:
        """Saves value (JSON, at most 256 KiB) as the job's checkpoint: every
        later execution starts with it as ``last_checkpoint``."""
        self._call.send({"checkpoint": value})
        self.last_checkpoint = value

    def report_usage(self, tokens: int) -> None:
        """Reports the tokens this execution spent, for its keys' tpm budgets
        and the tenant's usage: it replaces the job's estimate."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be a whole number from 0 up, not {tokens!r}")
        self._call.send({"usage": {"tokens": tokens}})

    def wait_for_signal(self, name: str, timeout: Duration = "1h") -> Signal:
        """Returns the signal name when this call was resumed by it (or by
        its timeout: then ``timed_out`` is set). Otherwise it ends the call
        and the job waits for the signal, holding no worker or slot, and
        is called again when it comes, with the same input and its last
        checkpoint: save what you need before waiting. A job waits for one
        signal at a time: keep the answers of earlier ones in the checkpoint."""
        if self.last_signal is not None and self.last_signal.name == name:
            return self.last_signal
        raise _Wait({"wait": {"for": name, "timeout": duration(timeout)}})

    def pushback(self, retry_after: float | None = None, keys: Sequence[str] = ()) -> NoReturn:
        """Ends the call as pushback: your upstream refused for capacity. The
        job goes back to its queue without spending an attempt, to run no
        sooner than retry_after seconds; keys names the job's adaptive keys
        the refusal concerns (all of them when empty). Call it before
        anything is sent: the answer is a 429 instead of a stream."""
        head = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\nContent-Length: 0\r\nConnection: close\r\n"
        if retry_after is not None:
            if not math.isfinite(retry_after) or retry_after < 0:
                raise ValueError(f"retry_after must be a number of seconds from 0 up, not {retry_after!r}")
            head += f"Retry-After: {math.ceil(retry_after)}\r\n"
        if keys:
            if any(not k or any(c in k for c in ",\r\n") for k in keys):
                raise ValueError(f"keys must be concurrency keys, not {list(keys)!r}")
            head += "Leasehold-Pushback-Keys: " + ",".join(keys) + "\r\n"
        raise _Pushback((head + "\r\n").encode())


class _Call:
    """The answer to one call: a 200 NDJSON stream begun at its first line
    (until then a pushback may still answer 429 instead)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self.began = False
        self.closed = threading.Event()

    def send(self, line: Mapping[str, Any]) -> None:
        if self.closed.is_set():
            raise asyncio.CancelledError("the worker closed the call")
        data = json.dumps(line, separators=(",", ":")).encode() + b"\n"
        if threading.get_ident() == self._thread:
            self._write(data)
        else:  # a sync handler's thread: the loop writes, in order
            self._loop.call_soon_threadsafe(self._write, data)

    def _write(self, data: bytes) -> None:
        if self.closed.is_set():
            return
        if not self.began:
            self.began = True
            self._writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n")
        self._writer.write(data)


class App:
    """The kinds this program serves, by name.

    >>> app = leasehold.App()
    >>> @app.handler("report.write")
    ... async def write(ctx: leasehold.Context) -> dict:
    ...     ctx.progress({"step": 1})
    ...     return {"ok": True}
    >>> app.serve(port=8000)  # LEASEHOLD_HANDLERS=report.write=http://127.0.0.1:8000/
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def handler(self, kind: str) -> Callable[[H], H]:
        """Registers the decorated function as the handler of kind: a
        coroutine function, or a plain one (run in a thread). What it
        returns (JSON) is the job's result."""

        def register(fn: H) -> H:
            if kind in self._handlers:
                raise ValueError(f"kind {kind!r} has a handler already")
            self._handlers[kind] = fn
            return fn

        return register

    async def start(self, host: str = "127.0.0.1", port: int = 8000) -> asyncio.Server:
        """Listens on host:port and serves calls until the server is closed."""
        return await asyncio.start_server(self._connection, host, port, limit=_MAX_HEAD)

    def serve(self, host: str = "127.0.0.1", port: int = 8000) -> None:
        """Serves calls on host:port until the process is stopped."""

        async def forever() -> None:
            async with await self.start(host, port) as server:
                await server.serve_forever()

        asyncio.run(forever())

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._answer(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the worker went away: nothing to answer
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request, *lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if request.split(" ")[0] != "POST":
            return _refuse(writer, 405, "a handler answers POST only")
        length = headers.get("content-length", "")
        if not length.isdigit() or int(length) > _MAX_BODY:
            return _refuse(writer, 400, f"want a Content-Length of at most {_MAX_BODY} bytes")
        body = await reader.readexactly(int(length))
        fn = self._handlers.get(headers.get("leasehold-kind", ""))
        if fn is None:
            return _refuse(writer, 404, f"no handler for kind {headers.get('leasehold-kind', '')!r}")
        call = _Call(writer)
        try:
            ctx = Context(headers, json.loads(body or b"{}"), call)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return _refuse(writer, 400, f"not a call of the remote handler protocol: {e}")
        task = asyncio.ensure_future(_run(fn, ctx))
        # The worker closes the connection to end the call: an EOF (or a
        # reset) while the handler runs cancels it.
        gone = asyncio.ensure_future(reader.read(1))
        await asyncio.wait([task, gone], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            call.closed.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        _finish(call, writer, task)
        await writer.drain()


async def _run(fn: Handler, ctx: Context) -> Any:
    if asyncio.iscoroutinefunction(fn):
        return await fn(ctx)
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, ctx))


def _finish(call: _Call, writer: asyncio.StreamWriter, task: asyncio.Future[Any]) -> None:
    """Sends the last line: the result, the wait or the error; or the 429."""
    err = None if task.cancelled() else task.exception()
    if isinstance(err, _Pushback) and not call.began:
        writer.write(err.head)
        return
    if task.cancelled():
        line: dict[str, Any] = {"error": {"message": "the handler was cancelled"}}
    elif err is None:
        try:
            call.send({"result": task.result()})
            return
        except (TypeError, ValueError) as e:
            line = {"error": {"message": f"the result is not JSON: {e}", "retryable": False}}
    elif isinstance(err, _Wait):
        line = err.line
    elif isinstance(err, _Pushback):
        line = {"error": {"message": "pushback after the answer began: call pushback before sending anything"}}
    else:
        line = {"error": {"message": f"{type(err).__name__}: {err}", "retryable": not isinstance(err, Permanent)}}
    call.send(line)


def _refuse(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    """Answers a call the handler cannot take: a 4xx fails the job without a retry."""
    body = message.encode()
    writer.write(
        f"HTTP/1.1 {status} Refused\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
