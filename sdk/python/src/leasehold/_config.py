"""What both clients are configured with."""

from __future__ import annotations

import os
import ssl
import urllib.parse
from dataclasses import dataclass

from ._protocol import USER_AGENT, Policy, Request

#: The API's address when neither url= nor LEASEHOLD_URL names one.
DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Config:
    scheme: str
    host: str
    port: int
    base_path: str  # the URL's path, without its last slash
    key: str
    timeout: float  # seconds for one request, connect to last byte
    stream_timeout: float  # seconds an event stream may stay silent
    ssl_context: ssl.SSLContext | None

    @classmethod
    def of(
        cls,
        url: str | None,
        key: str | None,
        timeout: float,
        stream_timeout: float,
        ssl_context: ssl.SSLContext | None,
    ) -> Config:
        url = url or os.environ.get("LEASEHOLD_URL") or DEFAULT_URL
        key = key or os.environ.get("LEASEHOLD_KEY")
        if not key:
            raise ValueError("no API key: pass key= or set LEASEHOLD_KEY")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url {url!r}: want http:// or https:// and a host")
        if parts.scheme == "https" and ssl_context is None:
            ssl_context = ssl.create_default_context()
        port = parts.port or (443 if parts.scheme == "https" else 80)
        # Keep-alives come every 15 s: a stream silent for longer is broken.
        stream_timeout = max(stream_timeout, 20.0)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), key, timeout, stream_timeout, ssl_context)

    def headers(self, request: Request) -> dict[str, str]:
        h = {
            "Authorization": f"Bearer {self.key}",
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
        }
        if request.body is not None:
            h["Content-Type"] = "application/json"
        h.update(request.headers)
        return h


class Base:
    """What Client and AsyncClient are built with.

    url and key default to the environment's ``LEASEHOLD_URL`` and
    ``LEASEHOLD_KEY``. timeout bounds one call (a ``get`` with wait gets
    its wait on top); an event stream silent for stream_timeout (at least
    20 s: the API sends a keep-alive every 15 s) is broken and opened again.
    An idempotent call is sent again after a 429 or 503 at most max_retries
    times, waiting as its Retry-After asks unless that is longer than
    max_retry_delay; a watch gives up after max_reconnects tries in a row
    that bring no event.
    """

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 60.0,
        max_retries: int = 3,
        max_retry_delay: float = 60.0,
        max_reconnects: int = 5,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._config = Config.of(url, key, timeout, stream_timeout, ssl_context)
        self._policy = Policy(max_retries, max_retry_delay, max_reconnects)
