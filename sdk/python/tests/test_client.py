"""The blocking client against the running API and worker."""

from __future__ import annotations

import datetime
import os
import time
import unittest
import uuid

import leasehold
from leasehold import errors

from .support import CLOSED_KEY, DroppingProxy, admin_key, eventually, require_api


def setUpModule() -> None:
    require_api()


def short_sleep(**input: object) -> dict[str, object]:
    return {"duration": "1s", "tick": "100ms", **input}


class JobsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = leasehold.Client()

    def running(self, job_id: str) -> leasehold.types.Job:
        return eventually(lambda: (j := self.client.get(job_id))["state"] == "running" and j, what=f"job {job_id} running")

    def test_submit_then_wait_for_the_result(self) -> None:
        job = self.client.submit("echo", {"hello": "world"}, metadata={"from": "sdk"}, timeout=30)
        self.assertEqual(job["state"], "queued")
        self.assertEqual(job["metadata"], {"from": "sdk"})
        done = self.client.get(job["id"], wait="20s")
        self.assertEqual(done["state"], "succeeded")
        self.assertEqual(done["result"], {"hello": "world"})

    def test_a_job_has_the_members_its_type_names(self) -> None:
        job = self.client.submit("echo", {"n": 1})
        got = self.client.get(job["id"])
        self.assertEqual(got["input"], {"n": 1})
        self.assertEqual(set(got), set(leasehold.types.Job.__annotations__))
        listed = next(j for j in self.client.list(kind="echo") if j["id"] == job["id"])
        self.assertEqual(set(listed), leasehold.types.Job.__required_keys__)

    def test_idempotency_key_returns_the_first_job(self) -> None:
        key = str(uuid.uuid4())
        first = self.client.submit("echo", {"n": 1}, idempotency_key=key)
        again = self.client.submit("echo", {"n": 1}, idempotency_key=key)
        self.assertEqual(again["id"], first["id"])
        with self.assertRaises(errors.UnprocessableContent) as caught:
            self.client.submit("echo", {"n": 2}, idempotency_key=key)
        self.assertEqual(caught.exception.status, 422)

    def test_watch_resumes_after_a_dropped_connection_without_duplicates(self) -> None:
        job = self.client.submit("sleep", short_sleep())
        proxy = DroppingProxy(os.environ["LEASEHOLD_URL"])
        self.addCleanup(proxy.close)
        seen = []
        for event in leasehold.Client(proxy.url).watch(job["id"]):
            seen.append(event)
            if len(seen) == 3:
                proxy.drop()
        self.assertGreaterEqual(proxy.connections, 2, "the stream was never opened again")
        whole = list(self.client.watch(job["id"]))
        self.assertEqual([e.id for e in seen], [e.id for e in whole], "resumed stream differs from a replay")
        self.assertEqual(len({e.id for e in seen}), len(seen), "an event came twice")
        self.assertGreater(len(seen), 5)
        self.assertEqual((seen[-1].event, seen[-1].data["state"]), ("state", "succeeded"))

    def test_watch_from_last_event_id(self) -> None:
        job = self.client.submit("echo", {})
        whole = list(self.client.watch(job["id"]))
        rest = list(self.client.watch(job["id"], last_event_id=whole[0].id))
        self.assertEqual([e.id for e in rest], [e.id for e in whole[1:]])
        self.assertEqual(list(leasehold.Client(max_reconnects=0).watch(job["id"], last_event_id=whole[-1].id)), [])

    def test_cancel_a_running_job(self) -> None:
        job = self.client.submit("sleep", {"duration": "1m", "tick": "100ms"})
        self.running(job["id"])
        cancelled = self.client.cancel(job["id"])
        self.assertTrue(cancelled["cancel_requested"])
        self.client.cancel(job["id"])  # idempotent
        self.assertEqual(self.client.get(job["id"], wait="20s")["state"], "cancelled")

    def test_cancel_of_a_succeeded_job_is_a_conflict_carrying_the_job(self) -> None:
        job = self.client.submit("echo", {})
        self.client.get(job["id"], wait="20s")
        with self.assertRaises(errors.Conflict) as caught:
            self.client.cancel(job["id"])
        self.assertEqual(caught.exception.status, 409)
        self.assertEqual(caught.exception.job["id"], job["id"])
        self.assertEqual(caught.exception.job["state"], "succeeded")

    def test_retry_a_failed_job_then_delete_it(self) -> None:
        job = self.client.submit("sleep", {"duration": "100ms", "tick": "100ms", "fail_attempts": 1}, max_attempts=1)
        self.assertEqual(self.client.get(job["id"], wait="20s")["state"], "failed")
        again = self.client.retry(job["id"])
        self.assertEqual(again["state"], "queued")
        done = self.client.get(job["id"], wait="20s")
        self.assertEqual((done["state"], done["attempt"]), ("succeeded", 2))
        self.assertIsNone(self.client.delete(job["id"]))
        with self.assertRaises(errors.NotFound):
            self.client.get(job["id"])

    def test_signal_resumes_a_waiting_job(self) -> None:
        job = self.client.submit("sleep", {"duration": "100ms", "tick": "100ms", "wait_for": "approval"})
        eventually(lambda: self.client.get(job["id"])["state"] == "waiting", what="waiting")
        self.client.signal(job["id"], "approval", {"by": "ada"})
        states = [e.data["state"] for e in self.client.watch(job["id"]) if e.event == "state"]
        self.assertIn("waiting", states)
        self.assertEqual(states[-1], "succeeded")
        self.assertEqual(self.client.get(job["id"])["result"], {"signal": {"by": "ada"}, "timed_out": False})

    def test_list_follows_pages(self) -> None:
        kind = "sdk.list" + uuid.uuid4().hex[:8]
        ids = [self.client.submit(kind, {}, delay="1h")["id"] for _ in range(3)]
        listed = [j["id"] for j in self.client.list(kind=kind, page_size=2)]
        self.assertEqual(listed, ids[::-1])
        for i in ids:
            self.client.cancel(i)

    def test_batch(self) -> None:
        items = [{"kind": "echo", "input": {"n": n}, "idempotency_key": str(uuid.uuid4())} for n in range(2)]
        first = self.client.batch(items)
        self.assertEqual([e["status"] for e in first], [201, 201])
        again = self.client.batch(items)
        self.assertEqual([e["status"] for e in again], [200, 200])
        self.assertEqual([e["job"]["id"] for e in again], [e["job"]["id"] for e in first])


class ErrorsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = leasehold.Client(max_retries=0)

    def test_not_found(self) -> None:
        with self.assertRaises(errors.NotFound) as caught:
            self.client.get("no-such-job")
        e = caught.exception
        self.assertEqual((e.status, e.title, e.type), (404, "Not Found", "about:blank"))
        self.assertTrue(e.detail)

    def test_bad_request_names_the_field(self) -> None:
        with self.assertRaises(errors.BadRequest) as caught:
            self.client.submit("echo", {}, max_attempts=0)
        self.assertEqual(caught.exception.fields, ["max_attempts"])
        self.assertTrue(caught.exception.errors[0].message)

    def test_unknown_key_is_unauthorized(self) -> None:
        with self.assertRaises(errors.Unauthorized):
            leasehold.Client(key="not-a-key-of-this-api").queues()

    def test_transport_error_when_nothing_listens(self) -> None:
        with self.assertRaises(errors.TransportError):
            leasehold.Client("http://127.0.0.1:9", max_retries=0).queues()

    def test_rate_limited_carries_retry_after(self) -> None:
        start = time.monotonic()
        with self.assertRaises(errors.RateLimited) as caught:
            self.client.submit("echo", {}, concurrency_keys=[CLOSED_KEY], on_busy="reject")
        e = caught.exception
        self.assertGreaterEqual(e.retry_after, 1)
        self.assertIn("concurrency_keys", e.fields)
        self.assertLess(time.monotonic() - start, e.retry_after, "a call without retries waited")

    def test_429_is_retried_after_retry_after_only_when_idempotent(self) -> None:
        client = leasehold.Client(max_retries=1)
        start = time.monotonic()
        with self.assertRaises(errors.RateLimited):
            client.submit("echo", {}, concurrency_keys=[CLOSED_KEY], on_busy="reject")
        self.assertLess(time.monotonic() - start, 1, "a submit without an Idempotency-Key was retried")
        start = time.monotonic()
        with self.assertRaises(errors.RateLimited) as caught:
            client.submit("echo", {}, concurrency_keys=[CLOSED_KEY], on_busy="reject", idempotency_key=str(uuid.uuid4()))
        self.assertGreaterEqual(time.monotonic() - start, caught.exception.retry_after, "the retry did not wait")


class AdminTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = leasehold.Client()
        self.admin = leasehold.Client(key=admin_key())

    def test_queues_limits_usage(self) -> None:
        self.assertIn("default", [q["name"] for q in self.admin.queues()])
        self.assertEqual(set(self.admin.queues()[0]), set(leasehold.types.Queue.__annotations__))
        limits = {lim["key"]: lim for lim in self.client.limits()}
        self.assertEqual(limits[CLOSED_KEY]["limit"], 0)
        self.assertEqual(set(limits[CLOSED_KEY]), set(leasehold.types.Limit.__annotations__))
        today = datetime.datetime.now(datetime.timezone.utc).date()
        report = self.client.usage(today, today)
        self.assertEqual([d["date"] for d in report["days"]], [today.isoformat()])

    def test_pause_and_resume_a_queue(self) -> None:
        self.addCleanup(self.admin.resume_queue, "default")
        paused = self.admin.pause_queue("default")
        self.assertEqual((paused["name"], paused["paused"]), ("default", True))
        self.assertEqual(set(paused), set(leasehold.types.Queue.__annotations__))
        self.assertTrue({q["name"]: q for q in self.admin.queues()}["default"]["paused"])
        self.assertEqual(self.admin.resume_queue("default")["paused"], False)
        self.assertFalse({q["name"]: q for q in self.admin.queues()}["default"]["paused"])

    def test_set_and_delete_a_limit(self) -> None:
        key = "sdk:admin/" + uuid.uuid4().hex[:8]
        self.admin.set_limit(key, limit=3)
        self.assertEqual({lim["key"]: lim["limit"] for lim in self.client.limits()}.get(key), 3)
        self.admin.delete_limit(key)
        self.assertNotIn(key, [lim["key"] for lim in self.client.limits()])
        with self.assertRaises(errors.NotFound):
            self.client.set_limit(key, limit=3)  # not the admin

    def test_update_a_limit_keeps_what_it_does_not_name(self) -> None:
        key = "sdk:admin/" + uuid.uuid4().hex[:8]
        self.admin.set_limit(key, limit=3, rpm=600, tpm=9000)
        updated = self.admin.update_limit(key, limit=5, rpm=None)
        self.assertEqual((updated["limit"], updated["rpm"], updated["tpm"]), (5, None, 9000))
        self.admin.delete_limit(key)

    def test_limits_reads_every_page(self) -> None:
        prefix = "sdk:many-" + uuid.uuid4().hex[:8] + "/"
        for i in range(501):  # one more than a page of GET /v1/limits holds
            self.admin.set_limit(f"{prefix}{i:03}", limit=1)
        try:
            self.assertEqual(len([lim for lim in self.admin.limits() if lim["key"].startswith(prefix)]), 501)
        finally:
            for i in range(501):
                self.admin.delete_limit(f"{prefix}{i:03}")

    def test_schedules(self) -> None:
        name = "sdk-" + uuid.uuid4().hex[:8]
        job = {"kind": "echo", "input": {"n": 1}, "timeout": 60}
        created = self.client.create_schedule(name, "0 3 * * *", job, timezone="Europe/Berlin")
        self.assertEqual((created["name"], created["paused"]), (name, False))
        self.assertEqual(self.client.create_schedule(name, "0 3 * * *", job, timezone="Europe/Berlin")["name"], name)
        self.assertIn(name, [s["name"] for s in self.client.schedules(page_size=1)])
        self.assertTrue(self.client.pause_schedule(name)["paused"])
        self.assertFalse(self.client.resume_schedule(name)["paused"])
        fired = self.client.trigger_schedule(name)
        self.assertEqual(fired["schedule"], name)
        self.assertEqual(self.client.get_schedule(name)["last_job_id"], fired["id"])
        self.client.delete_schedule(name)
        with self.assertRaises(errors.NotFound):
            self.client.get_schedule(name)


if __name__ == "__main__":
    unittest.main()
