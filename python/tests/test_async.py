"""The asyncio API: futures settled from the client's eventfd on the loop's thread."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import batchd
import pytest
from conftest import sha256_hex


def test_a_thousand_concurrent_tasks_each_get_their_answer(cpu_socket: str) -> None:
    texts = [f"async request {i} ✓" for i in range(1000)]

    async def one(client: batchd.Client, text: str) -> str:
        return await client.submit_async(text, timeout=60)

    async def main() -> list[str]:
        with batchd.Client(cpu_socket) as client:
            tasks = [asyncio.create_task(one(client, t)) for t in texts]
            return await asyncio.gather(*tasks)

    assert asyncio.run(main()) == [sha256_hex(t) for t in texts]


def test_submit_many_async_and_priorities(cpu_socket: str) -> None:
    texts = [f"many {i}" for i in range(200)]

    async def main(client: batchd.Client) -> None:
        assert await client.submit_many_async(texts, priority="low") == [sha256_hex(t) for t in texts]
        assert await client.submit_async("hi", priority="high") == sha256_hex("hi")
        outcomes = await client.submit_many_async(["ok", b"\xff"], return_exceptions=True)
        assert outcomes[0] == sha256_hex("ok") and isinstance(outcomes[1], batchd.InvalidUtf8)
        with pytest.raises(batchd.InvalidUtf8):
            await client.submit_many_async(["ok", b"\xff"])

    with batchd.Client(cpu_socket) as client:
        asyncio.run(main(client))
        # A second loop, after the first has gone, takes the client over.
        asyncio.run(main(client))


def test_refusals_raise_at_once_and_timeouts_come_from_the_deadline(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "1500000",
                          "--max-input-bytes", "16")

    async def main(client: batchd.Client) -> None:
        with pytest.raises(batchd.TooLarge):
            client.submit_async("z" * 17)
        started = time.monotonic()
        with pytest.raises(batchd.Timeout):
            await client.submit_async("slow", timeout=0.2)
        assert time.monotonic() - started < 1.4

    with batchd.Client(socket) as client:
        asyncio.run(main(client))


def test_an_abandoned_await_withdraws_its_request(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "300000")

    async def main(client: batchd.Client) -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.submit_async("a", timeout=30), 0.05)
        assert await client.submit_async("bc", timeout=30) == "cb"

    with batchd.Client(socket) as client:
        asyncio.run(main(client))


def test_close_fails_pending_requests_with_cancelled(start_daemon: Callable[..., str]) -> None:
    socket = start_daemon("--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "300000")

    async def main() -> None:
        client = batchd.Client(socket)
        pending = client.submit_async("never seen", timeout=30)
        client.close()
        with pytest.raises(batchd.Cancelled):
            await pending

    asyncio.run(main())


def test_one_loop_at_a_time_per_client(cpu_socket: str) -> None:
    client = batchd.Client(cpu_socket)
    bound = threading.Event()
    release = threading.Event()

    async def hold() -> None:
        pending = client.submit_async("held", timeout=30)
        bound.set()
        release.wait(10)  # blocks this loop: nothing polls, so the request stays pending here
        assert await pending == sha256_hex("held")

    holder = threading.Thread(target=lambda: asyncio.run(hold()))
    holder.start()
    try:
        assert bound.wait(10)

        async def intrude() -> None:
            with pytest.raises(RuntimeError, match="another event loop"):
                client.submit_async("x")

        asyncio.run(intrude())
    finally:
        release.set()
        holder.join()
    # The holder's loop is done with it: this one may take it.
    assert asyncio.run(intrude_ok(client)) == sha256_hex("now")
    client.close()


async def intrude_ok(client: batchd.Client) -> str:
    return await client.submit_async("now")


def test_threads_submit_while_the_loop_awaits(cpu_socket: str) -> None:
    client = batchd.Client(cpu_socket)
    wrong: list[str] = []

    def sync_work(thread: int) -> None:
        for i in range(200):
            text = f"sync {thread} {i}"
            if client.submit(text, timeout=30) != sha256_hex(text):
                wrong.append(text)

    async def main() -> list[str]:
        return await asyncio.gather(*(client.submit_async(f"async {i}", timeout=30) for i in range(500)))

    threads = [threading.Thread(target=sync_work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    answers = asyncio.run(main())
    for t in threads:
        t.join()
    client.close()
    assert answers == [sha256_hex(f"async {i}") for i in range(500)]
    assert not wrong
