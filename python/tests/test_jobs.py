"""batchd.jobs: asynchronous jobs through batchd-http (embedded queue), sync and asyncio, every
answer checked against the sim backend's (the input reversed)."""

from __future__ import annotations

import asyncio
from typing import Callable

import pytest
from conftest import sim_answer

import batchd
from batchd.jobs import AsyncJobsClient, JobFailed, JobNotFound, JobsClient


@pytest.fixture
def url(start_daemon: Callable[..., str], start_http: Callable[..., str]) -> str:
    sock = start_daemon("--backend", "sim", "--sim-repeat", "1", "--sim-poison", "POISON", "--max-wait-ms", "1")
    return "http://" + start_http(sock)


def test_one_input_and_many(url: str) -> None:
    with JobsClient(url) as jobs:
        assert jobs.run("hello jobs") == sim_answer("hello jobs")
        inputs = [f"input {i} é" for i in range(20)]
        job_id = jobs.submit(inputs, priority="low", deadline_s=60, timeout_ms=5000)
        assert jobs.wait(job_id, timeout=10) == [sim_answer(s) for s in inputs]
        job = jobs.poll(job_id)
        assert (job.id, job.status) == (job_id, "done")
        assert jobs.delete(job_id) == "deleted"
        with pytest.raises(JobNotFound):
            jobs.poll(job_id)


def test_failures_are_typed(url: str) -> None:
    with JobsClient(url) as jobs:
        with pytest.raises(JobFailed) as failed:
            jobs.run(["fine", "POISON pill"], timeout=10)
        assert failed.value.code == "backend_error"
        assert str(failed.value).startswith("input 1:")
        with pytest.raises(batchd.UnknownModel):
            jobs.submit("x", model="no_such_model")
        with pytest.raises(batchd.jobs.JobsError) as bad:
            jobs.submit("x", deadline_s=0)
        assert (bad.value.status, bad.value.code) == (400, "bad_deadline")


def test_asyncio_many_at_once(url: str) -> None:
    async def main() -> list[object]:
        async with AsyncJobsClient(url, connections=4) as jobs:
            return await asyncio.gather(*(jobs.run(f"async {i}", timeout=10) for i in range(100)))

    assert asyncio.run(main()) == [sim_answer(f"async {i}") for i in range(100)]
