"""What the tests against a running API share.

The API, a worker, Redis and NATS are started by the Go test that runs
these (internal/e2e, TestPythonSDK: `go test -run TestPythonSDK
./internal/e2e/`); it sets LEASEHOLD_URL and LEASEHOLD_KEY (a tenant),
LEASEHOLD_ADMIN_KEY (the admin tenant), a limit of 0 on the key
`sdk:closed`, a tpm budget on the key `sdk:metered`, and
LEASEHOLD_HANDLER_PORT: the port where the worker calls the kinds
`sdk.agent`, `sdk.pushback`, `sdk.cancel` and `sdk.sync`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from typing import Callable, TypeVar
from urllib.parse import urlsplit

import leasehold

T = TypeVar("T")

#: A concurrency key with a limit of 0: on_busy=reject is always refused.
CLOSED_KEY = "sdk:closed"

#: A key with a tpm budget: its limit shows the tokens its jobs reported.
METERED_KEY = "sdk:metered"


def require_api() -> None:
    """Fails a module whose tests need the running system when it is not set."""
    for name in ("LEASEHOLD_URL", "LEASEHOLD_KEY", "LEASEHOLD_ADMIN_KEY"):
        if not os.environ.get(name):
            raise RuntimeError(f"{name} is not set: run these tests with `go test -run TestPythonSDK ./internal/e2e/`")


def admin_key() -> str:
    return os.environ["LEASEHOLD_ADMIN_KEY"]


def eventually(probe: Callable[[], T | None], timeout: float = 20.0, what: str = "condition") -> T:
    """Polls probe until it returns something other than None or False."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.05)


def serve(app: leasehold.App, port: int) -> Callable[[], None]:
    """Serves app on port from a thread of its own, as a handler process
    would, until the function it returns is called."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(app.start("127.0.0.1", port))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()

    return stop


class DroppingProxy:
    """A TCP proxy in front of the API that can break every connection it
    carries at once, as a network or a load balancer would."""

    def __init__(self, url: str) -> None:
        target = urlsplit(url)
        self._target = (target.hostname, target.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop(self) -> None:
        """Breaks every connection open now."""
        with self._lock:
            for s in self._sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._sockets.clear()

    def close(self) -> None:
        self._listener.close()
        self.drop()
