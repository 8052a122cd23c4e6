"""The protocol's pure parts: no API needed."""

from __future__ import annotations

import datetime
import email.utils
import unittest

from leasehold import _operations as ops
from leasehold import _protocol as protocol
from leasehold import errors


class DurationTest(unittest.TestCase):
    def test_go_durations(self) -> None:
        cases = [(30, "30s"), (1.5, "1500ms"), (0.1, "100ms"), (datetime.timedelta(minutes=2), "120s"), ("10m", "10m")]
        for given, want in cases:
            self.assertEqual(protocol.duration(given), want, given)

    def test_seconds(self) -> None:
        cases = [("30s", 30), ("1m30s", 90), ("1.5h", 5400), ("250ms", 0.25), ("bogus", 0), (2, 2)]
        for given, want in cases:
            self.assertAlmostEqual(protocol.seconds(given), want, msg=given)


class EventParserTest(unittest.TestCase):
    def feed(self, text: str) -> list[protocol.Event]:
        parser = protocol.EventParser()
        events = [parser.feed(line.encode()) for line in text.splitlines(keepends=True)]
        return [e for e in events if e is not None]

    def test_events_comments_and_multiline_data(self) -> None:
        stream = (
            ": keep-alive\n\n"
            "id: 1-0\nevent: progress\ndata: {\"n\":\n"
            "data: 1}\n\n"
            "id: 2-0\r\nevent:state\r\ndata:{\"state\": \"succeeded\"}\r\n\r\n"
        )
        events = self.feed(stream)
        self.assertEqual(
            events,
            [protocol.Event("1-0", "progress", {"n": 1}), protocol.Event("2-0", "state", {"state": "succeeded"})],
        )

    def test_an_event_cut_short_is_not_dispatched(self) -> None:
        self.assertEqual(self.feed("id: 1-0\nevent: log\ndata: {}\n"), [])


class ErrorTest(unittest.TestCase):
    def test_problem_fields(self) -> None:
        body = b'{"type":"about:blank","title":"Bad Request","status":400,"detail":"bad","errors":[{"field":"timeout","message":"negative"}]}'
        e = errors.from_response(400, {}, body)
        self.assertIsInstance(e, errors.BadRequest)
        self.assertEqual((e.title, e.detail, e.fields, e.errors[0].message), ("Bad Request", "bad", ["timeout"], "negative"))
        self.assertIn("timeout: negative", str(e))

    def test_statuses(self) -> None:
        for status, cls in [(404, errors.NotFound), (409, errors.Conflict), (429, errors.RateLimited), (503, errors.Unavailable), (502, errors.ServerError), (418, errors.APIError)]:
            self.assertIs(type(errors.from_response(status, {}, b"{}")), cls, status)

    def test_a_body_that_is_not_a_problem(self) -> None:
        e = errors.from_response(502, {}, b"<html>bad gateway</html>")
        self.assertEqual((e.status, e.detail), (502, "<html>bad gateway</html>"))

    def test_retry_after(self) -> None:
        self.assertEqual(errors.retry_after("3"), 3)
        self.assertIsNone(errors.retry_after("soon"))
        date = email.utils.formatdate(1_000_010, usegmt=True)
        self.assertEqual(errors.retry_after(date, now=1_000_000), 10)


class RetryTest(unittest.TestCase):
    policy = protocol.Policy(max_retries=2, max_retry_delay=10)

    def delay(self, request: protocol.Request, status: int, retry_after: str | None, attempt: int = 0) -> float | None:
        headers = {} if retry_after is None else {"retry-after": retry_after}
        return protocol.retry_delay(self.policy, request, errors.from_response(status, headers, b""), attempt)

    def test_only_idempotent_calls_after_429_or_503_within_bounds(self) -> None:
        safe = protocol.Request("GET", "/v1/jobs/x", idempotent=True)
        self.assertEqual(self.delay(safe, 429, "3"), 3)
        self.assertEqual(self.delay(safe, 503, "2"), 2)
        self.assertIsNone(self.delay(safe, 429, "3", attempt=2), "past max_retries")
        self.assertIsNone(self.delay(safe, 429, "11"), "Retry-After past max_retry_delay")
        self.assertIsNone(self.delay(safe, 500, "1"))
        self.assertIsNone(self.delay(protocol.Request("POST", "/v1/jobs"), 429, "1"))
        self.assertLessEqual(self.delay(safe, 503, None), 0.1)

    def test_exchange_sends_again_then_raises(self) -> None:
        op = protocol.exchange(self.policy, protocol.Request("GET", "/v1/queues", idempotent=True))
        busy = protocol.Response(503, {"retry-after": "1"}, b"{}")
        self.assertIsInstance(next(op), protocol.Send)
        for _ in range(self.policy.max_retries):
            self.assertEqual(op.send(busy), protocol.Sleep(1))
            self.assertIsInstance(next(op), protocol.Send)
        with self.assertRaises(errors.Unavailable):
            op.send(busy)


class RunsTest(unittest.TestCase):
    """The v1.2 run calls, as requests: the API does not serve them yet."""

    policy = protocol.Policy()

    def test_steps_and_run(self) -> None:
        send = next(ops.steps(self.policy, "a/b"))
        self.assertEqual(send, protocol.Send(protocol.Request("GET", "/v1/jobs/a%2Fb/steps", idempotent=True)))
        send = next(ops.run(self.policy, "j"))
        self.assertEqual(send, protocol.Send(protocol.Request("GET", "/v1/jobs/j/run", idempotent=True)))

    def test_children_follow_next_cursor(self) -> None:
        op = ops.children(self.policy, "j", "failed", 1)
        self.assertEqual(next(op), protocol.Send(protocol.Request("GET", "/v1/jobs/j/children", {"state": "failed", "limit": "1"}, idempotent=True)))
        page = protocol.Response(200, {}, b'{"children": [{"key": "a", "job": {}}], "next_cursor": "c1"}')
        self.assertEqual(op.send(page), protocol.Emit({"key": "a", "job": {}}))
        self.assertEqual(next(op), protocol.Send(protocol.Request("GET", "/v1/jobs/j/children", {"state": "failed", "limit": "1", "cursor": "c1"}, idempotent=True)))
        last = protocol.Response(200, {}, b'{"children": [{"key": "b", "job": {}}], "next_cursor": null}')
        self.assertEqual(op.send(last), protocol.Emit({"key": "b", "job": {}}))
        with self.assertRaises(StopIteration):
            next(op)


if __name__ == "__main__":
    unittest.main()
