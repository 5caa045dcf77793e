"""The synchronous API: answers, typed errors, priorities, threads."""

from __future__ import annotations

import threading
import time
from typing import Callable

import batchd
import pytest
from conftest import sha256_hex, sim_answer


def test_submit_answers_the_sha256_of_its_input(cpu_socket: str) -> None:
    with batchd.Client(cpu_socket) as client:
        for text in ["hello", "", "Grüße, 世界 🚀", "x" * 10_000]:
            assert client.submit(text) == sha256_hex(text)
        assert client.submit("hello".encode()) == sha256_hex("hello")
        assert client.connected
        assert client.max_input_bytes == 65536


def test_submit_many_answers_each_in_order(cpu_socket: str) -> None:
    texts = [f"request {i} é" for i in range(300)]
    with batchd.Client(cpu_socket) as client:
        assert client.submit_many(texts, timeout=30) == [sha256_hex(t) for t in texts]
        assert client.submit_many(tuple(texts[:3])) == [sha256_hex(t) for t in texts[:3]]
        assert client.submit_many(iter([])) == []
        with pytest.raises(TypeError):
            client.submit_many("not a list")


def test_too_large_is_raised_and_submit_many_reports_it_in_place(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "cpu", "--max-input-bytes", "64")
    with batchd.Client(socket) as client:
        with pytest.raises(batchd.TooLarge) as raised:
            client.submit("y" * 65)
        assert isinstance(raised.value, batchd.Error) and "64" in str(raised.value)
        assert raised.value.code == "too_large"
        outcomes = client.submit_many(["ok", "y" * 65, "fine"], return_exceptions=True)
        assert outcomes[0] == sha256_hex("ok") and outcomes[2] == sha256_hex("fine")
        assert isinstance(outcomes[1], batchd.TooLarge)
        with pytest.raises(batchd.TooLarge):
            client.submit_many(["ok", "y" * 65])


def test_bytes_that_are_not_utf8_are_invalid_utf8(cpu_socket: str) -> None:
    with batchd.Client(cpu_socket) as client:
        with pytest.raises(batchd.InvalidUtf8) as raised:
            client.submit(b"caf\xe9")
        assert str(raised.value)


def test_no_daemon_is_daemon_unavailable(socket_dir: str) -> None:
    with pytest.raises(batchd.DaemonUnavailable) as raised:
        batchd.Client(f"{socket_dir}/nobody.sock", connect_timeout=0.1)
    assert "nobody.sock" in str(raised.value)


def test_a_slow_batch_is_a_timeout(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "1500000")
    with batchd.Client(socket) as client:
        started = time.monotonic()
        with pytest.raises(batchd.Timeout):
            client.submit("slow", timeout=0.2)
        assert time.monotonic() - started < 1.4  # the deadline, not the batch, ended the wait


def test_a_poison_input_is_a_backend_error(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "sim", "--sim-fixed-us", "100", "--sim-poison", "POISON")
    with batchd.Client(socket) as client:
        with pytest.raises(batchd.BackendError):
            client.submit("POISON pill")
        assert client.submit("healthy") == sim_answer("healthy")


def test_more_requests_than_slots_are_overloaded(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "sim", "--sim-fixed-us", "100", "--slots-per-client", "4")
    texts = [f"t{i}" for i in range(12)]
    with batchd.Client(socket) as client:
        outcomes = client.submit_many(texts, return_exceptions=True)
    answered = [o for o in outcomes if isinstance(o, str)]
    assert [o for o in outcomes if not isinstance(o, str)]
    assert all(isinstance(o, batchd.Overloaded) for o in outcomes if not isinstance(o, str))
    assert answered and all(o == sim_answer(t) for t, o in zip(texts, outcomes) if isinstance(o, str))


def test_priority_classes_reach_the_daemon(cpu_socket: str) -> None:
    with batchd.Client(cpu_socket) as client:
        for priority in ("high", "low", "normal", None):
            assert client.submit(f"p {priority}", priority=priority) == sha256_hex(f"p {priority}")
        assert client.submit_many(["a", "b"], priority="high") == [sha256_hex("a"), sha256_hex("b")]
        with pytest.raises(ValueError):
            client.submit("x", priority="urgent")
        # The daemon counts requests by class in the status it publishes about every 50 ms.
        deadline = time.monotonic() + 10
        while client.status()["requests_taken_by_class"] != {"high": 3, "normal": 2, "low": 1}:
            assert time.monotonic() < deadline, client.status()["requests_taken_by_class"]
            time.sleep(0.02)
        status = client.status()
        assert status["backend"] == "cpu" and status["requests_ok"] >= 6 and status["devices"]


def test_bad_arguments_are_clear_errors(cpu_socket: str) -> None:
    with batchd.Client(cpu_socket) as client:
        for timeout in (0, -1, float("nan"), 1e9):
            with pytest.raises(ValueError):
                client.submit("x", timeout=timeout)
        with pytest.raises(TypeError):
            client.submit(42)  # type: ignore[arg-type]
        client.close()
        with pytest.raises(RuntimeError):
            client.submit("x")


def test_eight_threads_share_one_client(cpu_socket: str) -> None:
    per_thread = 250
    wrong: list[str] = []
    errors: list[BaseException] = []

    with batchd.Client(cpu_socket) as client:
        def work(thread: int) -> None:
            try:
                for i in range(per_thread):
                    text = f"thread {thread} request {i}"
                    if client.submit(text, timeout=30) != sha256_hex(text):
                        wrong.append(text)
            except BaseException as error:  # reported below, with the thread's failure
                errors.append(error)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and not wrong


def test_models_by_name_sync_and_asyncio(start_daemon: Callable[..., str]) -> None:
    import asyncio

    socket = start_daemon("--backend", "cpu", "--cpu-threads", "1",
                          "--model", "reversed:backend=sim,sim_devices=1,sim_fixed_us=100")
    with batchd.Client(socket) as client:
        assert client.submit("abc") == sha256_hex("abc")
        assert client.submit("abc", model="batchstring") == sha256_hex("abc")
        assert client.submit("abc", model="reversed") == sim_answer("abc")
        assert client.submit_many(["ab", "cd"], model="reversed") == ["ba", "dc"]
        with pytest.raises(batchd.UnknownModel, match="batchstring, reversed"):
            client.submit("abc", model="nope")
        with pytest.raises(TypeError):
            client.submit("abc", model=3)  # type: ignore[arg-type]

        async def both() -> list[str]:
            one = client.submit_async("xyz", model="reversed")
            many = await client.submit_many_async(["uv", "w"], model="reversed")
            return [await one, *many]

        assert asyncio.run(both()) == ["zyx", "vu", "w"]
        models = client.status()["models"]
        assert [m["name"] for m in models] == ["batchstring", "reversed"]
        assert [m["backend"] for m in models] == ["cpu", "sim"]
        assert all(m["state"] == "ready" for m in models)
        # Each model's devices are its own: the sim model's one, beside the cpu model's.
        assert all(m["healthy_devices"] == len(m["devices"]) > 0 for m in models)
        assert len(models[0]["devices"]) == len(client.status()["devices"])
