"""Both clients read HTTP/1.1 framing that the API does not happen to
send today but a proxy in front of it may: an event split across chunks,
chunk extensions, trailers."""

from __future__ import annotations

import asyncio
import itertools
import threading
import unittest

import leasehold

# One stream: a progress event and the terminal state event, cut across
# chunks in the middle of lines.
_CHUNKS = [b"id: 1-0\nevent: progress\nda", b'ta: {"n": 1}\n\nid: 2-0\nevent: state\n', b'data: {"state": "succeeded"}\n\n']
_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in _CHUNKS)
    + b"0\r\nX-Trailer: yes\r\n\r\n"
)
_EVENTS = [leasehold.Event("1-0", "progress", {"n": 1}), leasehold.Event("2-0", "state", {"state": "succeeded"})]


class ChunkedStreamTest(unittest.TestCase):
    def setUp(self) -> None:
        loop = asyncio.new_event_loop()
        self.addCleanup(loop.close)

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_ANSWER)
            await writer.drain()
            writer.close()

        server = loop.run_until_complete(asyncio.start_server(answer, "127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        def stop() -> None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            server.close()

        self.addCleanup(stop)

    def test_sync(self) -> None:
        # One more than there are: a client that misreads goes on reconnecting.
        events = leasehold.Client(self.url, key="k").watch("j")
        self.assertEqual(list(itertools.islice(events, len(_EVENTS) + 1)), _EVENTS)

    def test_async(self) -> None:
        async def watch() -> list[leasehold.Event]:
            events = []
            async for e in leasehold.AsyncClient(self.url, key="k").watch("j"):
                events.append(e)
                if len(events) > len(_EVENTS):
                    break
            return events

        self.assertEqual(asyncio.run(watch()), _EVENTS)


if __name__ == "__main__":
    unittest.main()
