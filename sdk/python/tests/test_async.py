"""The asyncio client against the running API and worker."""

from __future__ import annotations

import asyncio
import os
import time
import unittest

import leasehold
from leasehold import errors

from .support import CLOSED_KEY, DroppingProxy, admin_key, require_api


def setUpModule() -> None:
    require_api()


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = leasehold.AsyncClient()

    async def test_submit_then_wait_for_the_result(self) -> None:
        job = await self.client.submit("echo", {"n": 1})
        done = await self.client.get(job["id"], wait=20)
        self.assertEqual((done["state"], done["result"]), ("succeeded", {"n": 1}))
        self.assertIn(job["id"], [j["id"] async for j in self.client.list(kind="echo", page_size=1)])

    async def test_watch_resumes_after_a_dropped_connection_without_duplicates(self) -> None:
        job = await self.client.submit("sleep", {"duration": "1s", "tick": "100ms"})
        proxy = DroppingProxy(os.environ["LEASEHOLD_URL"])
        self.addCleanup(proxy.close)
        seen = []
        async for event in leasehold.AsyncClient(proxy.url).watch(job["id"]):
            seen.append(event)
            if len(seen) == 3:
                proxy.drop()
        self.assertGreaterEqual(proxy.connections, 2, "the stream was never opened again")
        whole = [e async for e in self.client.watch(job["id"])]
        self.assertEqual([e.id for e in seen], [e.id for e in whole], "resumed stream differs from a replay")
        self.assertEqual((seen[-1].event, seen[-1].data["state"]), ("state", "succeeded"))

    async def test_cancelling_a_watch_closes_it_and_cancel_ends_the_job(self) -> None:
        job = await self.client.submit("sleep", {"duration": "1m", "tick": "100ms"})
        progressed = asyncio.Event()

        async def follow() -> None:
            async for event in self.client.watch(job["id"]):
                if event.event == "progress":
                    progressed.set()

        task = asyncio.create_task(follow())
        await asyncio.wait_for(progressed.wait(), 20)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        self.assertTrue((await self.client.cancel(job["id"]))["cancel_requested"])
        self.assertEqual((await self.client.get(job["id"], wait="20s"))["state"], "cancelled")

    async def test_signal_and_retry(self) -> None:
        job = await self.client.submit(
            "sleep", {"duration": "100ms", "tick": "100ms", "wait_for": "go", "fail_attempts": 1}, max_attempts=1
        )
        await self.client.signal(job["id"], "go", 7)  # kept until the job waits for it
        self.assertEqual((await self.client.get(job["id"], wait="20s"))["state"], "failed")
        await self.client.retry(job["id"])
        done = await self.client.get(job["id"], wait="20s")
        self.assertEqual((done["state"], done["result"]), ("succeeded", {"signal": 7, "timed_out": False}))

    async def test_pause_and_resume_a_queue_answer_the_queue(self) -> None:
        admin = leasehold.AsyncClient(key=admin_key())
        self.addAsyncCleanup(admin.resume_queue, "default")
        paused = await admin.pause_queue("default")
        self.assertEqual((paused["name"], paused["paused"]), ("default", True))
        self.assertEqual(set(paused), set(leasehold.types.Queue.__annotations__))
        self.assertEqual((await admin.resume_queue("default"))["paused"], False)

    async def test_errors(self) -> None:
        client = leasehold.AsyncClient(max_retries=0)
        with self.assertRaises(errors.NotFound):
            await client.get("no-such-job")
        with self.assertRaises(errors.BadRequest) as bad:
            await client.submit("echo", {}, timeout=-1)
        self.assertEqual(bad.exception.fields, ["timeout"])
        start = time.monotonic()
        with self.assertRaises(errors.RateLimited) as limited:
            await client.submit("echo", {}, concurrency_keys=[CLOSED_KEY], on_busy="reject")
        self.assertGreaterEqual(limited.exception.retry_after, 1)
        self.assertLess(time.monotonic() - start, limited.exception.retry_after)
        with self.assertRaises(errors.TransportError):
            await leasehold.AsyncClient("http://127.0.0.1:9", max_retries=0).queues()


if __name__ == "__main__":
    unittest.main()
