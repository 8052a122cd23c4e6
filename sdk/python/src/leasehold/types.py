"""The shapes of the API's objects, for type checkers. At run time they
are plain dicts decoded from JSON: members the API adds later are there
too."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict


class JobError(TypedDict):
    code: str
    message: str


class Execution(TypedDict):
    id: str
    worker: str
    fencing_token: int
    attempt: int
    started_at: str
    heartbeat_at: str
    finished_at: Optional[str]


class _JobMembers(TypedDict):
    id: str
    tenant: str
    queue: str
    kind: str
    state: str
    attempt: int
    max_attempts: int
    priority: int
    concurrency_keys: List[str]
    created_at: str
    started_at: Optional[str]
    finished_at: Optional[str]
    cancel_requested: bool
    execution: Optional[Execution]
    result: Any
    error: Optional[JobError]
    metadata: Dict[str, Any]
    cost: Optional[Dict[str, int]]
    checkpoint: Any
    waiting_for: Optional[Dict[str, str]]
    webhook: Optional[Dict[str, Any]]
    schedule: Optional[str]


class Job(_JobMembers, total=False):
    # Absent from a listing (it may be 1 MiB a job): get the job for it.
    input: Any


class BatchItem(TypedDict, total=False):
    status: int
    job: Job
    problem: Dict[str, Any]


class Child(TypedDict):
    key: str
    job: Job


class Queue(TypedDict):
    name: str
    queued: int
    running: int
    retrying: int
    waiting: int
    paused: bool


class Limit(TypedDict):
    key: str
    limit: Optional[int]
    in_use: int
    effective_limit: Optional[int]
    rpm: Optional[int]
    requests_last_minute: Optional[int]
    tpm: Optional[int]
    tokens_last_minute: Optional[int]
    adaptive: Optional[bool]
    per_tenant: Optional[int]
    throttled_until: Optional[str]
    waiting: int


class UsageDay(TypedDict):
    date: str
    counts: Dict[str, int]


# "from" is a keyword: the functional form names it.
Usage = TypedDict("Usage", {"tenant": str, "from": str, "to": str, "days": List[UsageDay]})


class Schedule(TypedDict):
    name: str
    cron: str
    timezone: str
    job: Dict[str, Any]
    overlap: str
    paused: bool
    next_run_at: Optional[str]
    last_run_at: Optional[str]
    last_job_id: Optional[str]
    created_at: str
