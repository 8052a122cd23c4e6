"""The HTTP protocol of the Leasehold API, without I/O.

Every API operation is written once here, as a generator that yields
actions (send a request, open a stream, read a line, sleep, emit a value)
and receives their results. The sync client runs these generators with
http.client and time.sleep, the async client with asyncio streams and
asyncio.sleep: retries, Retry-After, paging and the resumption of event
streams behave the same in both because they are this one code.
"""

from __future__ import annotations

import datetime
import json
import random
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Generator, Mapping, Union

from . import errors
from ._version import __version__

USER_AGENT = f"leasehold-python/{__version__}"

#: States a job never leaves unless it is retried.
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "expired"})

#: A duration: a Go duration string ("30s"), seconds, or a timedelta.
Duration = Union[str, float, int, datetime.timedelta]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    body: Any = None  # JSON-encoded when not None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Safe to send again after a 429, a 503 or a broken connection.
    idempotent: bool = False
    # Seconds the server may hold the request on purpose (?wait=), added to
    # the client's timeout.
    hold: float = 0.0

    def target(self, base_path: str) -> str:
        q = urllib.parse.urlencode(self.query)
        return base_path + self.path + ("?" + q if q else "")

    def encoded(self) -> bytes | None:
        return None if self.body is None else json.dumps(self.body).encode()


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class Event:
    """One event of a job's stream: ``event`` is ``state``, ``progress``,
    ``output`` or ``log``; ``data`` is its decoded JSON (for ``state``, the
    job object as it was at that transition)."""

    id: str
    event: str
    data: Any


# Actions an operation yields to its driver.


@dataclass(frozen=True)
class Send:
    """Send the request, read the whole answer: the driver replies with a
    Response."""

    request: Request


@dataclass(frozen=True)
class Open:
    """Send the request and read the answer's head: the driver replies with a
    Response whose body is read only when its status is not 200; the body
    of a 200 is read line by line with ReadLine. Opening a stream closes
    the one open before."""

    request: Request


@dataclass(frozen=True)
class ReadLine:
    """The driver replies with the stream's next line, b"" at its end."""


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Emit:
    """A value for the caller: an operation's result, or an item of an
    iterator."""

    value: Any


Action = Union[Send, Open, ReadLine, Sleep, Emit]
Operation = Generator[Action, Any, None]


@dataclass(frozen=True)
class Policy:
    """How a client retries."""

    # Retries of one idempotent call after a 429, a 503 or a broken
    # connection; 0 turns retrying off.
    max_retries: int = 3
    # A Retry-After longer than this is not waited for: the error is raised.
    max_retry_delay: float = 60.0
    # Reconnections of an event stream in a row that bring no new event.
    max_reconnects: int = 5

    def backoff(self, attempt: int) -> float:
        """Seconds before retry number attempt+1 when the server named none:
        exponential from 0.1 s, capped at 5 s, with jitter."""
        return min(5.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)


def duration(value: Duration) -> str:
    """A Go duration string from seconds or a timedelta; a string is sent as
    it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    ms = round(value * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def seconds(value: Duration) -> float:
    """Seconds in a duration, for the client's own timeouts; a string it
    cannot read counts as 0 (the server refuses it)."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if not isinstance(value, str):
        return float(value)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total, number = 0.0, ""
    rest = value
    while rest:
        if rest[0].isdigit() or rest[0] == ".":
            number, rest = number + rest[0], rest[1:]
            continue
        unit = next((u for u in ("ms", "s", "m", "h") if rest.startswith(u)), None)
        if unit is None or not number:
            return 0.0
        total += float(number) * units[unit]
        number, rest = "", rest[len(unit) :]
    return total


def segment(value: str) -> str:
    """A path segment, escaped."""
    return urllib.parse.quote(value, safe="")


def query(**params: Any) -> dict[str, str]:
    return {k: str(v) for k, v in params.items() if v is not None}


def exchange(policy: Policy, request: Request) -> Generator[Action, Any, Response]:
    """Sends request until it gets an answer to return; raises the APIError
    of an error status. An idempotent request is sent again, at most
    policy.max_retries times, after a 429 or 503 (when its Retry-After is
    not too long) or a broken connection."""
    attempt = 0
    while True:
        try:
            response = yield Send(request)
        except errors.TransportError:
            if not request.idempotent or attempt >= policy.max_retries:
                raise
            delay = policy.backoff(attempt)
        else:
            if response.status < 400:
                return response
            delay = refusal_delay(policy, request, response, attempt)
        attempt += 1
        yield Sleep(delay)


def retry_delay(policy: Policy, request: Request, error: errors.APIError, attempt: int) -> float | None:
    """Seconds to wait before sending request again after error, or None
    when it must not be sent again."""
    if not request.idempotent or attempt >= policy.max_retries:
        return None
    if not isinstance(error, (errors.RateLimited, errors.Unavailable)):
        return None
    if error.retry_after is None:
        return policy.backoff(attempt)
    if error.retry_after > policy.max_retry_delay:
        return None
    return error.retry_after


def refusal_delay(policy: Policy, request: Request, response: Response, attempt: int) -> float:
    """Seconds to wait before sending request again after the error status
    of response; raises its APIError when it must not be sent again."""
    error = errors.from_response(response.status, response.headers, response.body)
    delay = retry_delay(policy, request, error, attempt)
    if delay is None:
        raise error
    return delay


class Runner:
    """Steps an operation for a driver, which performs each action that
    next() returns and sets reply to its result, or calls broke() when the
    connection failed."""

    def __init__(self, op: Operation) -> None:
        self._op = op
        self.reply: Any = None
        self._error: errors.TransportError | None = None

    def next(self) -> Action | None:
        """The operation's next action; None once it has returned."""
        try:
            action = self._op.send(self.reply) if self._error is None else self._op.throw(self._error)
        except StopIteration:
            return None
        self.reply, self._error = None, None
        return action

    def broke(self, cause: BaseException) -> None:
        """The action failed as a connection does: the operation gets a
        TransportError."""
        self._error = errors.TransportError(f"{type(cause).__name__}: {cause}")
        self._error.__cause__ = cause

    def close(self) -> None:
        self._op.close()


def call(policy: Policy, request: Request) -> Operation:
    """One request; emits its decoded body (None for an empty one)."""
    response = yield from exchange(policy, request)
    yield Emit(response.json())


def member(policy: Policy, request: Request, name: str) -> Operation:
    """One request; emits one member of its body."""
    response = yield from exchange(policy, request)
    yield Emit(response.json()[name])


def pages(policy: Policy, path: str, name: str, params: Mapping[str, str], whole: bool = False) -> Operation:
    """Emits every item of a paged list, following next_cursor; with
    whole, one list of them all once the last page is read."""
    cursor, every = None, []
    while True:
        q = dict(params)
        if cursor is not None:
            q["cursor"] = cursor
        response = yield from exchange(policy, Request("GET", path, q, idempotent=True))
        page = response.json()
        if whole:
            every.extend(page[name])
        else:
            for item in page[name]:
                yield Emit(item)
        cursor = page.get("next_cursor")
        if not cursor:
            if whole:
                yield Emit(every)
            return


class EventParser:
    """Reads a text/event-stream line by line (WHATWG server-sent events)."""

    def __init__(self) -> None:
        self._id = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, raw: bytes) -> Event | None:
        """Takes one line; returns the event that a blank line completes."""
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = Event(self._id, self._event or "message", json.loads("\n".join(self._data)))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None  # a comment: the server's keep-alive
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            self._id = value
        elif name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def watch(policy: Policy, job_id: str, last_event_id: str | None = None) -> Operation:
    """Emits the job's events, from the start or after last_event_id, until
    the stream ends after the job's terminal state event.

    A connection that breaks, or a stream that ends before a terminal state,
    is opened again with Last-Event-ID: the events come on from the last one
    emitted, none twice and none lost. After policy.max_reconnects tries in
    a row that bring no event, the last error is raised. A watch from the
    terminal state event's id emits nothing and ends.
    """
    path = f"/v1/jobs/{segment(job_id)}/events"
    last_state = None  # of the last state event seen
    tries = 0
    # The server ends a stream at once, with nothing, when the job ended
    # before last_event_id: an empty stream opened just after the job read
    # as ended is the end of the watch.
    ended = False
    while True:
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        request = Request("GET", path, headers=headers, idempotent=True)
        try:
            response = yield Open(request)
            if response.status != 200:
                delay = refusal_delay(policy, request, response, tries)
                tries += 1
                yield Sleep(delay)
                continue
            parser, received = EventParser(), False
            while line := (yield ReadLine()):
                event = parser.feed(line)
                if event is None:
                    continue
                last_event_id, tries, received = event.id, 0, True
                if event.event == "state" and isinstance(event.data, dict):
                    last_state = event.data.get("state")
                yield Emit(event)
        except errors.TransportError:
            if tries >= policy.max_reconnects:
                raise
        else:
            if last_state in TERMINAL or (ended and not received):
                return
            ended = False
            if not received:
                job = yield from exchange(policy, Request("GET", f"/v1/jobs/{segment(job_id)}", idempotent=True))
                ended = job.json()["state"] in TERMINAL
            if ended:
                continue  # once more, for a terminal event written since
            if tries >= policy.max_reconnects:
                raise errors.TransportError(f"the event stream of job {job_id} ended {tries + 1} times without an event")
        yield Sleep(policy.backoff(tries))
        tries += 1
