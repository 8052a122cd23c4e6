"""Exceptions: every refusal of the API is an APIError carrying the RFC 9457
problem it answered with, as a subclass named for its status."""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Mapping

__all__ = [
    "APIError",
    "BadRequest",
    "Conflict",
    "FieldError",
    "LeaseholdError",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "UnprocessableContent",
    "UnsupportedMediaType",
]


class LeaseholdError(Exception):
    """Base of every error this package raises."""


class TransportError(LeaseholdError):
    """The API could not be reached, or the connection broke before a whole
    answer came: whether a write took effect is unknown."""


class FieldError(dict):  # type: ignore[type-arg]
    """One entry of a problem's ``errors``: ``{"field": ..., "message": ...}``."""

    @property
    def field(self) -> str:
        return str(self.get("field", ""))

    @property
    def message(self) -> str:
        return str(self.get("message", ""))


class APIError(LeaseholdError):
    """The API answered with an error status.

    The problem's members are attributes (``type``, ``title``, ``status``,
    ``detail``, ``errors``); ``body`` is the whole decoded body (a 409 also
    carries the job's members) and ``retry_after`` the seconds the
    ``Retry-After`` header asked for, or None.
    """

    def __init__(self, status: int, body: Mapping[str, Any], retry_after: float | None = None) -> None:
        self.status = status
        self.body = dict(body)
        self.type = str(body.get("type", "about:blank"))
        self.title = str(body.get("title", ""))
        self.detail = str(body.get("detail", ""))
        raw = body.get("errors")
        self.errors = [FieldError(e) for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []
        self.retry_after = retry_after
        fields = "; ".join(f"{e.field}: {e.message}" for e in self.errors)
        super().__init__(f"{status} {self.title}: {self.detail}" + (f" ({fields})" if fields else ""))

    @property
    def fields(self) -> list[str]:
        """The names of the fields at fault, in the order the API gave."""
        return [e.field for e in self.errors]


class BadRequest(APIError):
    """400: the request was malformed or a field invalid (see ``errors``)."""


class Unauthorized(APIError):
    """401: the API key is missing or unknown."""


class NotFound(APIError):
    """404: no such job or schedule, or it belongs to another tenant."""


class Conflict(APIError):
    """409: the job's state does not allow the call; ``job`` is the job as it
    stands when the body carries one."""

    @property
    def job(self) -> dict[str, Any] | None:
        if "id" not in self.body:
            return None
        problem = {"type", "title", "status", "detail", "errors"}
        return {k: v for k, v in self.body.items() if k not in problem}


class PayloadTooLarge(APIError):
    """413: the body is larger than the API accepts."""


class UnsupportedMediaType(APIError):
    """415: the body is not JSON."""


class UnprocessableContent(APIError):
    """422: an ``Idempotency-Key`` was reused with a different body."""


class RateLimited(APIError):
    """429: over the submission rate, a full key with ``on_busy=reject``, or
    too many open streams; ``retry_after`` says when to try again."""


class ServerError(APIError):
    """A 5xx other than 503."""


class Unavailable(ServerError):
    """503: Redis is unreachable or slow; ``retry_after`` says when to try
    again, and an ``Idempotency-Key`` makes a retried submit safe."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: UnprocessableContent,
    429: RateLimited,
    503: Unavailable,
}


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def from_response(status: int, headers: Mapping[str, str], body: bytes) -> APIError:
    """The error for an answer with an error status. A body that is not a
    problem (a proxy's HTML page) becomes the detail."""
    decoded: Any
    try:
        decoded = json.loads(body) if body else {}
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        decoded = {"detail": body.decode("utf-8", "replace").strip()}
    decoded.setdefault("status", status)
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else APIError)
    return cls(status, decoded, retry_after(headers.get("retry-after")))
