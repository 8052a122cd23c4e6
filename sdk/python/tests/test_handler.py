"""The handler framework against the running API and worker: the worker
calls this module's App for the kinds the Go test named in
LEASEHOLD_HANDLERS."""

from __future__ import annotations

import asyncio
import datetime
import os
import threading
import unittest
from typing import Any, Callable

import leasehold

from .support import METERED_KEY, eventually, require_api, serve

app = leasehold.App()
# What the handlers saw, for the tests to read: guarded by _lock.
_lock = threading.Lock()
_calls: dict[str, int] = {}
_cancelled: set[str] = set()
_stop: Callable[[], None] | None = None


def _count(ctx: leasehold.Context) -> int:
    with _lock:
        _calls[ctx.job_id] = _calls.get(ctx.job_id, 0) + 1
        return _calls[ctx.job_id]


@app.handler("sdk.agent")
async def agent(ctx: leasehold.Context) -> Any:
    calls, resumed_from = _count(ctx), ctx.last_checkpoint
    if resumed_from is None:
        ctx.progress({"step": 1, "of": 2})
        ctx.output("drafting\n")
        ctx.log("drafted", topic=ctx.input["topic"])
        ctx.checkpoint({"draft": "about " + ctx.input["topic"]})
    approval = ctx.wait_for_signal("approval", timeout="1h")
    ctx.report_usage(1234)
    assert ctx.deadline is not None
    return {
        "resumed_from": resumed_from,
        "approved": approval.data["approved"],
        "calls": calls,
        "attempt": ctx.attempt,
        "deadline_ahead": ctx.deadline > datetime.datetime.now(datetime.timezone.utc),
    }


@app.handler("sdk.pushback")
async def pushback(ctx: leasehold.Context) -> Any:
    calls = _count(ctx)
    if calls == 1:
        ctx.pushback(retry_after=0.2)
    return {"calls": calls, "attempt": ctx.attempt}


@app.handler("sdk.cancel")
async def cancel(ctx: leasehold.Context) -> None:
    ctx.progress({"started": True})
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        with _lock:
            _cancelled.add(ctx.job_id)
        raise


@app.handler("sdk.sync")
def sync(ctx: leasehold.Context) -> Any:
    if ctx.input.get("fail"):
        raise leasehold.Permanent("no retry fixes this input")
    ctx.output("from a thread\n")
    return {"thread": threading.current_thread() is not threading.main_thread(), "token": ctx.fencing_token}


def setUpModule() -> None:
    global _stop
    require_api()
    _stop = serve(app, int(os.environ["LEASEHOLD_HANDLER_PORT"]))


def tearDownModule() -> None:
    if _stop is not None:
        _stop()


class HandlerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = leasehold.Client()

    def test_checkpoint_wait_for_a_signal_then_resume_with_usage(self) -> None:
        job = self.client.submit("sdk.agent", {"topic": "refunds"}, concurrency_keys=[METERED_KEY], max_attempts=1)
        waiting = eventually(lambda: (j := self.client.get(job["id"]))["state"] == "waiting" and j, what="the wait")
        self.assertEqual(waiting["checkpoint"], {"draft": "about refunds"})
        self.assertEqual(waiting["waiting_for"]["name"], "approval")
        self.client.signal(job["id"], "approval", {"approved": True})
        done = self.client.get(job["id"], wait="20s")
        self.assertEqual(done["state"], "succeeded", done["error"])
        self.assertEqual(
            done["result"],
            {"resumed_from": {"draft": "about refunds"}, "approved": True, "calls": 2, "attempt": 1, "deadline_ahead": True},
        )
        events = {e.event: e.data for e in self.client.watch(job["id"])}
        self.assertEqual(events["progress"], {"step": 1, "of": 2})
        self.assertEqual(events["output"], {"text": "drafting\n"})
        self.assertEqual(events["log"], {"message": "drafted", "topic": "refunds"})
        (metered,) = [lim for lim in self.client.limits() if lim["key"] == METERED_KEY]
        self.assertEqual(metered["tokens_last_minute"], 1234)

    def test_pushback_queues_the_job_again_without_spending_an_attempt(self) -> None:
        job = self.client.submit("sdk.pushback", {}, max_attempts=1)
        done = self.client.get(job["id"], wait="20s")
        self.assertEqual(done["state"], "succeeded", done["error"])
        self.assertEqual((done["attempt"], done["result"]), (1, {"calls": 2, "attempt": 1}))

    def test_cancel_mid_call_cancels_the_handler(self) -> None:
        job = self.client.submit("sdk.cancel", {})
        for event in self.client.watch(job["id"]):
            if event.event == "progress":
                break
        self.client.cancel(job["id"])
        self.assertEqual(self.client.get(job["id"], wait="20s")["state"], "cancelled")
        eventually(lambda: job["id"] in _cancelled, what="the handler's cancellation")

    def test_a_sync_handler_runs_in_a_thread_and_permanent_fails_at_once(self) -> None:
        ok = self.client.submit("sdk.sync", {})
        done = self.client.get(ok["id"], wait="20s")
        self.assertEqual(done["state"], "succeeded", done["error"])
        self.assertEqual(done["result"], {"thread": True, "token": done["execution"]["fencing_token"]})
        bad = self.client.submit("sdk.sync", {"fail": True}, max_attempts=3)
        failed = self.client.get(bad["id"], wait="20s")
        self.assertEqual((failed["state"], failed["attempt"]), ("failed", 1))
        self.assertIn("no retry fixes this input", failed["error"]["message"])


class FenceTest(unittest.TestCase):
    def test_a_lower_token_is_refused_and_changes_nothing(self) -> None:
        fence = leasehold.Fence()
        fence.admit("job-1", 7)
        fence.admit("job-1", 7)  # the same owner again
        fence.admit("job-2", 1)  # resources are fenced apart
        with self.assertRaises(leasehold.StaleToken) as stale:
            fence.admit("job-1", 5)
        self.assertEqual((stale.exception.token, stale.exception.highest), (5, 7))
        fence.admit("job-1", 8)
        with self.assertRaises(leasehold.StaleToken):
            fence.admit("job-1", 7)
        with self.assertRaises(ValueError):
            fence.admit("job-1", 0)


if __name__ == "__main__":
    unittest.main()
