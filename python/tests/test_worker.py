"""batchd.Worker: a Python model as a worker process's model, in str, bytes, memoryview and asyncio
forms; a model's exception fails only its input; SIGTERM stops a worker gracefully."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Iterator

import batchd
import pytest
from conftest import sha256_hex


@pytest.fixture
def workers_socket(start_daemon: Callable[..., str]) -> str:
    return start_daemon("--backend", "workers", "--max-wait-ms", "2")


class Serving:
    """A Worker serving `fn` on a thread, stopped at the end."""

    def __init__(self, worker: batchd.Worker, serve: Callable[[], bool]) -> None:
        self.worker = worker
        self.result: list[bool] = []
        self.thread = threading.Thread(target=lambda: self.result.append(serve()))
        self.thread.start()

    def stop(self) -> bool:
        self.worker.stop()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive()
        return self.result[0]


def wait_for_workers(client: batchd.Client, n: int) -> None:
    deadline = time.monotonic() + 10
    while client.status()["workers"] != n:
        assert time.monotonic() < deadline, f"no {n} worker(s) attached within 10 s"
        time.sleep(0.01)


def sha256_batch(texts: list[str]) -> list[str]:
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]


def test_a_python_worker_answers_every_request(workers_socket: str) -> None:
    worker = batchd.Worker(workers_socket, name="sha", version="2.0", concurrency=2)
    assert worker.concurrency == 2
    serving = Serving(worker, lambda: worker.serve(sha256_batch))
    with batchd.Client(workers_socket) as client:
        wait_for_workers(client, 1)
        texts = [f"python {i} é" for i in range(500)]
        assert client.submit_many(texts, timeout=30) == [sha256_hex(t) for t in texts]
        device = client.status()["devices"][0]
        assert device["worker"]["name"] == "sha"
        assert device["worker"]["version"] == "2.0"
        assert device["worker"]["pid"] == os.getpid()
        assert client.status()["devices"][1]["state"] == "absent"
    assert serving.stop() is True


def test_bytes_and_memoryview_inputs(workers_socket: str) -> None:
    seen_types: set[type] = set()

    def from_bytes(items: list[bytes]) -> list[bytes]:
        seen_types.update(type(i) for i in items)
        return [hashlib.sha256(i).hexdigest().encode() for i in items]

    def from_views(items: list[memoryview]) -> list[str]:
        seen_types.update(type(i) for i in items)
        return [hashlib.sha256(i).hexdigest() for i in items]

    with batchd.Client(workers_socket) as client:
        for serve in (lambda w: w.serve_bytes(from_bytes), lambda w: w.serve(from_views, inputs="memoryview")):
            worker = batchd.Worker(workers_socket)
            serving = Serving(worker, lambda w=worker, s=serve: s(w))
            wait_for_workers(client, 1)
            texts = [f"bytes {i}" for i in range(100)]
            assert client.submit_many(texts, timeout=30) == [sha256_hex(t) for t in texts]
            assert serving.stop() is True
            wait_for_workers(client, 0)
    assert seen_types == {bytes, memoryview}


def test_an_exception_fails_only_the_input_that_raises(workers_socket: str) -> None:
    def picky(texts: list[str]) -> list[str]:
        if any(t.startswith("poison") for t in texts):
            raise ValueError("cannot digest poison")
        return sha256_batch(texts)

    worker = batchd.Worker(workers_socket)
    serving = Serving(worker, lambda: worker.serve(picky))
    with batchd.Client(workers_socket) as client:
        wait_for_workers(client, 1)
        texts = [f"fine {i}" for i in range(40)] + ["poison!"] + [f"fine too {i}" for i in range(40)]
        outcomes = client.submit_many(texts, timeout=30, return_exceptions=True)
        for text, outcome in zip(texts, outcomes):
            if text == "poison!":
                assert isinstance(outcome, batchd.BackendError)
                assert "cannot digest poison" in str(outcome)
            else:
                assert outcome == sha256_hex(text)
    serving.stop()


def test_a_model_returning_the_wrong_count_fails_its_batch(workers_socket: str) -> None:
    worker = batchd.Worker(workers_socket)
    serving = Serving(worker, lambda: worker.serve(lambda texts: texts[:-1]))
    with batchd.Client(workers_socket) as client:
        wait_for_workers(client, 1)
        with pytest.raises(batchd.BackendError, match="returned 0 outputs for 1 inputs"):
            client.submit("one", timeout=10)
    serving.stop()


def test_an_asyncio_model(workers_socket: str) -> None:
    async def model(texts: list[str]) -> list[str]:
        await asyncio.sleep(0.001)
        return sha256_batch(texts)

    async def main() -> bool:
        worker = batchd.Worker(workers_socket, concurrency=2)
        serving = asyncio.ensure_future(worker.serve_async(model))
        with batchd.Client(workers_socket) as client:
            await asyncio.get_running_loop().run_in_executor(None, wait_for_workers, client, 1)
            texts = [f"async {i}" for i in range(200)]
            answers = await client.submit_many_async(texts, timeout=30)
            assert answers == [sha256_hex(t) for t in texts]
        worker.stop()
        return await serving

    assert asyncio.run(main()) is True


def test_sigterm_stops_a_worker_process_gracefully(workers_socket: str) -> None:
    script = textwrap.dedent(f"""
        import hashlib, sys, time, batchd
        def slow(texts):
            time.sleep(0.3)
            return [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        worker = batchd.Worker({workers_socket!r}, name="slow")
        print("attached", flush=True)
        sys.exit(0 if worker.serve(slow) else 3)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=os.environ.copy())
    assert process.stdout is not None and process.stdout.readline() == b"attached\n"
    with batchd.Client(workers_socket) as client:
        wait_for_workers(client, 1)
        answer: list[str] = []
        caller = threading.Thread(target=lambda: answer.append(client.submit("held", timeout=20)))
        caller.start()
        deadline = time.monotonic() + 10
        while client.status()["devices"][0]["outstanding_requests"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        caller.join(timeout=20)
        assert answer == [sha256_hex("held")]


def test_a_worker_serves_the_model_it_names(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "cpu", "--cpu-threads", "1", "--model", "upper:backend=workers")
    with pytest.raises(batchd.Error, match="model batchstring runs the cpu backend inside the daemon"):
        batchd.Worker(socket, model="batchstring", attach_timeout=2)
    with pytest.raises(batchd.Error, match="no model named lower here; workers serve model upper"):
        batchd.Worker(socket, model="lower", attach_timeout=2)
    worker = batchd.Worker(socket, model="upper")
    serving = Serving(worker, lambda: worker.serve(lambda texts: [t.upper() for t in texts]))
    with batchd.Client(socket) as client:
        assert client.submit("abc", model="upper") == "ABC"
        assert client.submit("abc") == sha256_hex("abc")
        deadline = time.monotonic() + 10
        while [m["state"] for m in client.status()["models"]] != ["ready", "ready"]:
            assert time.monotonic() < deadline, client.status()["models"]
            time.sleep(0.02)
    assert serving.stop()


def test_a_model_whose_first_call_is_slow_is_ready_only_once_warmed_up(
        start_daemon: Callable[..., str], start_http: Callable[..., str]) -> None:
    """A worker model with a warm-up: the worker's slow first call (a lazy initialisation) is paid
    by the warm-up, the model is not ready until then (status page, /v2/models/NAME/ready), and its
    first real request costs what a steady one does."""
    socket = start_daemon("--backend", "cpu", "--max-wait-ms", "1", "--model",
                          'slowstart:backend=workers,min_workers=0,max_wait_ms=1,device_timeout_ms=10000,'
                          'warmup_batch_sizes="1,4",warmup_inputs=hello')
    http = start_http(socket)
    calls: list[list[str]] = []

    def model(texts: list[str]) -> list[str]:
        if not calls:
            time.sleep(2.0)  # the model's first call initialises it
        calls.append(list(texts))
        time.sleep(0.02)
        return sha256_batch(texts)

    def ready_over_http() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{http}/v2/models/slowstart/ready", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    worker = batchd.Worker(socket, name="slowstart", concurrency=1)
    serving = Serving(worker, lambda: worker.serve(model))
    with batchd.Client(socket) as client:
        def state() -> str:
            return next(m["state"] for m in client.status()["models"] if m["name"] == "slowstart")

        seen_states: set[str] = set()
        warming_over_http = False
        deadline = time.monotonic() + 30
        while state() != "ready":
            assert time.monotonic() < deadline, f"slowstart not ready within 30 s (seen: {seen_states})"
            seen_states.add(state())
            status, body = ready_over_http()
            if status == 503 and "warming up" in body:
                warming_over_http = True
            else:
                assert status == 503, body  # not ready over HTTP while the daemon says it is not
            time.sleep(0.02)
        assert "warming" in seen_states
        assert warming_over_http
        # Every warm-up batch ran before the model said ready: sizes 1 and 4, twice, of its input.
        assert [len(c) for c in calls] == [1, 4, 1, 4]
        assert all(text == "hello" for c in calls for text in c)

        def timed(text: str) -> float:
            started = time.monotonic()
            assert client.submit(text, model="slowstart", timeout=10) == sha256_hex(text)
            return time.monotonic() - started

        first = timed("first")
        steady = sorted(timed(f"steady {i}") for i in range(21))
        p50 = steady[len(steady) // 2]
        print(f"first request {first * 1e3:.1f} ms, steady p50 {p50 * 1e3:.1f} ms")
        assert first <= 2 * p50, (first, p50)
    serving.stop()
