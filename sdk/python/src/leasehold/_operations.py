"""The API's operations, each one Operation (see _protocol) that both
clients run. Paths, bodies, query parameters and which calls are safe to
repeat are known here only."""

from __future__ import annotations

import datetime
from typing import Any, Mapping, Sequence

from ._protocol import (
    Duration,
    Operation,
    Policy,
    Request,
    call,
    duration,
    member,
    pages,
    query,
    seconds,
    segment,
)

_DURATIONS = frozenset({"timeout", "max_wait", "delay"})


def _submission(item: Mapping[str, Any]) -> dict[str, Any]:
    """A submission as the API reads it: members that are None left out,
    durations given as seconds or timedeltas written as Go durations."""
    return {k: duration(v) if k in _DURATIONS else v for k, v in item.items() if v is not None}


def _job(job_id: str, action: str = "") -> str:
    return f"/v1/jobs/{segment(job_id)}" + (f"/{action}" if action else "")


def submit(p: Policy, kind: str, input: Any, idempotency_key: str | None, fields: Mapping[str, Any]) -> Operation:
    headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
    body = _submission({"kind": kind, "input": input, **fields})
    return call(p, Request("POST", "/v1/jobs", body=body, headers=headers, idempotent=idempotency_key is not None))


def batch(p: Policy, jobs: Sequence[Mapping[str, Any]]) -> Operation:
    items = [_submission(j) for j in jobs]
    # Sent again only when no item could be created twice.
    again = all("idempotency_key" in j for j in items)
    return member(p, Request("POST", "/v1/jobs/batch", body={"jobs": items}, idempotent=again), "jobs")


def get(p: Policy, job_id: str, wait: Duration | None) -> Operation:
    if wait is None:
        return call(p, Request("GET", _job(job_id), idempotent=True))
    return call(p, Request("GET", _job(job_id), query(wait=duration(wait)), idempotent=True, hold=seconds(wait)))


def list_jobs(p: Policy, filters: Mapping[str, Any], page_size: int | None) -> Operation:
    return pages(p, "/v1/jobs", "jobs", query(limit=page_size, **filters))


def cancel(p: Policy, job_id: str) -> Operation:
    return call(p, Request("POST", _job(job_id, "cancel"), idempotent=True))


def retry(p: Policy, job_id: str) -> Operation:
    return call(p, Request("POST", _job(job_id, "retry")))


def delete(p: Policy, job_id: str) -> Operation:
    return call(p, Request("DELETE", _job(job_id), idempotent=True))


def signal(p: Policy, job_id: str, name: str, data: Any) -> Operation:
    body = {"name": name} if data is None else {"name": name, "data": data}
    return call(p, Request("POST", _job(job_id, "signal"), body=body))


def steps(p: Policy, job_id: str) -> Operation:
    return member(p, Request("GET", _job(job_id, "steps"), idempotent=True), "steps")


def children(p: Policy, job_id: str, state: str | None, page_size: int | None) -> Operation:
    return pages(p, _job(job_id, "children"), "children", query(state=state, limit=page_size))


def run(p: Policy, job_id: str) -> Operation:
    return call(p, Request("GET", _job(job_id, "run"), idempotent=True))


def queues(p: Policy) -> Operation:
    return member(p, Request("GET", "/v1/queues", idempotent=True), "queues")


def pause_queue(p: Policy, name: str, paused: bool) -> Operation:
    action = "pause" if paused else "resume"
    return call(p, Request("POST", f"/v1/queues/{segment(name)}/{action}", idempotent=True))


def limits(p: Policy) -> Operation:
    return pages(p, "/v1/limits", "limits", query(limit=500), whole=True)


def set_limit(p: Policy, key: str, fields: Mapping[str, Any]) -> Operation:
    body = {k: v for k, v in fields.items() if v is not None}
    return call(p, Request("PUT", f"/v1/limits/{segment(key)}", body=body, idempotent=True))


def update_limit(p: Policy, key: str, fields: Mapping[str, Any]) -> Operation:
    return call(p, Request("PATCH", f"/v1/limits/{segment(key)}", body=dict(fields), idempotent=True))


def delete_limit(p: Policy, key: str) -> Operation:
    return call(p, Request("DELETE", f"/v1/limits/{segment(key)}", idempotent=True))


def usage(p: Policy, start: datetime.date | str, end: datetime.date | str, tenant: str | None) -> Operation:
    q = query(tenant=tenant, **{"from": str(start), "to": str(end)})
    return call(p, Request("GET", "/v1/usage", q, idempotent=True))


def create_schedule(p: Policy, name: str, cron: str, job: Mapping[str, Any], fields: Mapping[str, Any]) -> Operation:
    body = {"name": name, "cron": cron, "job": _submission(job), **{k: v for k, v in fields.items() if v is not None}}
    # The same name with the same body answers 200 with the schedule.
    return call(p, Request("POST", "/v1/schedules", body=body, idempotent=True))


def list_schedules(p: Policy, page_size: int | None) -> Operation:
    return pages(p, "/v1/schedules", "schedules", query(limit=page_size))


def _schedule(name: str, action: str = "") -> str:
    return f"/v1/schedules/{segment(name)}" + (f"/{action}" if action else "")


def get_schedule(p: Policy, name: str) -> Operation:
    return call(p, Request("GET", _schedule(name), idempotent=True))


def delete_schedule(p: Policy, name: str) -> Operation:
    return call(p, Request("DELETE", _schedule(name), idempotent=True))


def pause_schedule(p: Policy, name: str, paused: bool) -> Operation:
    return call(p, Request("POST", _schedule(name, "pause" if paused else "resume"), idempotent=True))


def trigger_schedule(p: Policy, name: str) -> Operation:
    return call(p, Request("POST", _schedule(name, "trigger")))
