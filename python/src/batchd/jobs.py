"""Asynchronous jobs through batchd-http (POST /v1/jobs; docs/JOBS.md): submit now, collect later.

    jobs = batchd.jobs.JobsClient("http://127.0.0.1:8080")
    job_id = jobs.submit(["first", "second"], deadline_s=3600)   # answered once the job is queued
    outputs = jobs.wait(job_id)                                   # ["...", "..."], or raises
    outputs = jobs.run("one input")                               # submit and wait: "..."

    async with batchd.jobs.AsyncJobsClient("http://127.0.0.1:8080") as jobs:
        output = await jobs.run("one input")

Standard library only (http.client, asyncio streams): one keep-alive connection per client, made
again when the server closes it. A refused submission raises the batchd error of its code
(Overloaded, TooLarge, UnknownModel, ...) or JobsError; a job that ends without an answer raises
JobFailed (its error's code and message) or JobExpired from wait(); an unknown id, JobNotFound.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Sequence, Union

from ._errors import BY_CODE, Error, Timeout

__all__ = ["Job", "JobsClient", "AsyncJobsClient", "JobsError", "JobFailed", "JobExpired", "JobNotFound"]

Outputs = Union[str, list[str]]


class JobsError(Error):
    """batchd-http refused a jobs call; `code` is its error code, `status` the HTTP status."""

    def __init__(self, message: str, code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class JobNotFound(JobsError):
    """No job with that id: never submitted, expired, or deleted."""


class JobFailed(Error):
    """A job ended without its outputs: `code` and str() are its error's (docs/HTTP.md)."""

    def __init__(self, job_id: str, code: str, message: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.code = code


class JobExpired(JobFailed):
    """A queued job not started by its deadline: it never ran."""


@dataclass
class Job:
    """A job's state as a poll answers it."""

    id: str
    status: str  # pending, done, failed, expired
    outputs: Outputs | None = None  # done: "output" (one input) or "outputs" (many, in order)
    error_code: str = ""
    error_message: str = ""

    def result(self) -> Outputs:
        """The outputs of a done job; JobFailed or JobExpired otherwise (pending: Error)."""
        if self.status == "done":
            assert self.outputs is not None
            return self.outputs
        if self.status == "expired":
            raise JobExpired(self.id, self.error_code, self.error_message)
        if self.status == "failed":
            raise JobFailed(self.id, self.error_code, self.error_message)
        raise Error(f"job {self.id} is {self.status}")


def _submission(inputs: str | Sequence[str], priority: str | None, model: str | None,
                deadline_s: int | None) -> bytes:
    body: dict[str, Any] = {"input": inputs} if isinstance(inputs, str) else {"inputs": list(inputs)}
    if priority is not None:
        body["priority"] = priority
    if model is not None:
        body["model"] = model
    if deadline_s is not None:
        body["deadline_s"] = int(deadline_s)
    return json.dumps(body).encode()


def _headers(timeout_ms: int | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if timeout_ms is not None:
        headers["X-Timeout-Ms"] = str(int(timeout_ms))
    return headers


def _refusal(status: int, body: bytes) -> Error:
    try:
        error = json.loads(body)["error"]
        code, message = str(error.get("code", "")), str(error.get("message", ""))
    except (ValueError, KeyError, TypeError):
        code, message = "", body[:200].decode(errors="replace")
    if code == "job_not_found":
        return JobNotFound(message, code, status)
    for cls in BY_CODE:
        if cls.code == code:
            return cls(message)
    return JobsError(f"HTTP {status} {code}: {message}", code, status)


def _job(status: int, body: bytes) -> Job:
    if status != 200:
        raise _refusal(status, body)
    answer = json.loads(body)
    error = answer.get("error") or {}
    outputs = answer["outputs"] if "outputs" in answer else answer.get("output")
    return Job(answer["id"], answer["status"], outputs, str(error.get("code", "")), str(error.get("message", "")))


def _submitted(status: int, body: bytes) -> str:
    if status != 202:
        raise _refusal(status, body)
    return str(json.loads(body)["id"])


class _Backoff:
    """Poll intervals: from `first`, growing by half each time, to at most 0.5 s."""

    def __init__(self, first: float) -> None:
        self.next = first

    def take(self) -> float:
        wait, self.next = self.next, min(self.next * 1.5, 0.5)
        return wait


class JobsClient:
    """Jobs through batchd-http at `url` (http://HOST:PORT), from one thread at a time."""

    def __init__(self, url: str = "http://127.0.0.1:8080", timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"expected http://HOST[:PORT], not {url!r}")
        self._host, self._port, self._timeout = parsed.hostname, parsed.port or 80, timeout
        self._conn: http.client.HTTPConnection | None = None

    def _call(self, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, path, body=body, headers=headers or {})
                response = self._conn.getresponse()
                return response.status, response.read()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                self._conn.close()
                self._conn = None
                if attempt == 1 or method == "POST":  # a POST may have been taken: never sent twice
                    raise
        raise AssertionError("unreachable")

    def submit(self, inputs: str | Sequence[str], *, priority: str | None = None, model: str | None = None,
               deadline_s: int | None = None, timeout_ms: int | None = None) -> str:
        """Queues a job of one input (a str: answered with one output) or many; returns its id."""
        return _submitted(*self._call("POST", "/v1/jobs", _submission(inputs, priority, model, deadline_s),
                                      _headers(timeout_ms)))

    def poll(self, job_id: str) -> Job:
        return _job(*self._call("GET", f"/v1/jobs/{job_id}"))

    def wait(self, job_id: str, timeout: float | None = None, interval: float = 0.002) -> Outputs:
        """Polls until the job is no longer pending; its outputs, or JobFailed / JobExpired.
        Timeout if `timeout` seconds pass first (the job itself goes on)."""
        until = None if timeout is None else time.monotonic() + timeout
        backoff = _Backoff(interval)
        while True:
            job = self.poll(job_id)
            if job.status != "pending":
                return job.result()
            if until is not None and time.monotonic() >= until:
                raise Timeout(f"job {job_id} still pending after {timeout} s")
            time.sleep(backoff.take())

    def run(self, inputs: str | Sequence[str], *, timeout: float | None = None, **submit_options: Any) -> Outputs:
        """submit() then wait()."""
        return self.wait(self.submit(inputs, **submit_options), timeout)

    def delete(self, job_id: str) -> str:
        """Deletes the job: "cancelled" if it was pending, "deleted" if it had finished."""
        status, body = self._call("DELETE", f"/v1/jobs/{job_id}")
        if status != 200:
            raise _refusal(status, body)
        return str(json.loads(body)["status"])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> JobsClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncJobsClient:
    """JobsClient for asyncio: the same calls as coroutines, any number at once (each on a
    connection of a small pool, made as needed)."""

    def __init__(self, url: str = "http://127.0.0.1:8080", timeout: float = 30.0, connections: int = 8) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"expected http://HOST[:PORT], not {url!r}")
        self._host, self._port, self._timeout = parsed.hostname, parsed.port or 80, timeout
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(connections)

    async def _exchange(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], method: str, path: str,
                        body: bytes, headers: dict[str, str]) -> tuple[int, bytes, bool]:
        reader, writer = conn
        head = f"{method} {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError("batchd-http closed the connection")
        status = int(status_line.split()[1])
        length, keep = 0, True
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
            elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                keep = False
        return status, await reader.readexactly(length), keep

    async def _call(self, method: str, path: str, body: bytes = b"",
                    headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        async with self._slots:
            for attempt in (0, 1):
                reused = bool(self._idle)
                conn = self._idle.pop() if reused else await asyncio.wait_for(
                    asyncio.open_connection(self._host, self._port), self._timeout)
                try:
                    status, data, keep = await asyncio.wait_for(
                        self._exchange(conn, method, path, body, headers or {}), self._timeout)
                except (ConnectionError, asyncio.IncompleteReadError, IndexError, ValueError):
                    conn[1].close()
                    # Only a reused connection may have been closed by the server while idle; a POST
                    # may have been taken, so it is never sent twice.
                    if attempt == 1 or not reused or method == "POST":
                        raise
                    continue
                if keep:
                    self._idle.append(conn)
                else:
                    conn[1].close()
                return status, data
        raise AssertionError("unreachable")

    async def submit(self, inputs: str | Sequence[str], *, priority: str | None = None, model: str | None = None,
                     deadline_s: int | None = None, timeout_ms: int | None = None) -> str:
        return _submitted(*await self._call("POST", "/v1/jobs", _submission(inputs, priority, model, deadline_s),
                                            _headers(timeout_ms)))

    async def poll(self, job_id: str) -> Job:
        return _job(*await self._call("GET", f"/v1/jobs/{job_id}"))

    async def wait(self, job_id: str, timeout: float | None = None, interval: float = 0.002) -> Outputs:
        until = None if timeout is None else time.monotonic() + timeout
        backoff = _Backoff(interval)
        while True:
            job = await self.poll(job_id)
            if job.status != "pending":
                return job.result()
            if until is not None and time.monotonic() >= until:
                raise Timeout(f"job {job_id} still pending after {timeout} s")
            await asyncio.sleep(backoff.take())

    async def run(self, inputs: str | Sequence[str], *, timeout: float | None = None,
                  **submit_options: Any) -> Outputs:
        return await self.wait(await self.submit(inputs, **submit_options), timeout)

    async def delete(self, job_id: str) -> str:
        status, body = await self._call("DELETE", f"/v1/jobs/{job_id}")
        if status != 200:
            raise _refusal(status, body)
        return str(json.loads(body)["status"])

    async def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()

    async def __aenter__(self) -> AsyncJobsClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
