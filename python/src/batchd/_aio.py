"""Drives a Client's asynchronous requests on an asyncio event loop.

The client library signals an eventfd when answers may have come; the loop watches it with
add_reader and calls poll(), which hands back (token, answer or Error) pairs that settle futures,
all on the loop's thread. No thread per request. The library lets one thread at a time poll, so a
Client serves one event loop at a time: it binds to a loop while requests are pending there.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import TYPE_CHECKING, Any, Sequence, Union

from ._errors import Cancelled, Error

if TYPE_CHECKING:
    from . import Client

# poll() also finds requests past their deadline, which no event announces: while requests are
# pending the loop polls at least this often, so a Timeout comes at most this late.
_DEADLINE_POLL_S = 0.01


class AsyncDriver:
    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()  # guards binding to a loop, which other threads may race
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._timer: asyncio.TimerHandle | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}  # by token
        self._next_token = 0

    def submit(self, text: Union[str, bytes], timeout: float, priority: str | None,
               model: str | None = None) -> asyncio.Future[str]:
        loop = self._bind()
        token = self._take_tokens(1)
        try:
            request_id = self._client._submit_async(text, timeout, priority, token, model)
        except BaseException:
            self._unbind_if_idle()
            raise
        return self._track(loop, token, request_id)

    def submit_many(self, texts: Sequence[Union[str, bytes]], timeout: float,
                    priority: str | None, model: str | None = None) -> list[asyncio.Future[Any]]:
        loop = self._bind()
        first = self._take_tokens(len(texts))
        try:
            admitted = self._client._submit_many_async(texts, timeout, priority, first, model)
        except BaseException:
            self._unbind_if_idle()
            raise
        futures = []
        for i, outcome in enumerate(admitted):
            if isinstance(outcome, Error):
                refused = loop.create_future()
                refused.set_exception(outcome)
                futures.append(refused)
            else:
                futures.append(self._track(loop, first + i, outcome))
        self._unbind_if_idle()
        return futures

    def close(self) -> None:
        """Fails the pending futures with Cancelled; called by Client.close()."""
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done() and not future.get_loop().is_closed():
                future.set_exception(Cancelled("the batchd.Client was closed before the answer came"))
        self._unbind_if_idle()

    def _take_tokens(self, count: int) -> int:
        first = self._next_token
        self._next_token += count
        return first

    def _track(self, loop: asyncio.AbstractEventLoop, token: int, request_id: int) -> asyncio.Future[Any]:
        future = loop.create_future()
        self._pending[token] = future
        # An awaiter that gives up (a cancelled task, wait_for's timeout) withdraws the request.
        future.add_done_callback(functools.partial(self._on_done, request_id))
        return future

    def _on_done(self, request_id: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled() and not self._client.closed:
            self._client._cancel(request_id)

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is loop:
                return loop
            if self._loop is not None and not self._loop.is_closed():
                raise RuntimeError("this batchd.Client has asynchronous requests pending on another "
                                   "event loop; use one Client per event loop")
            # A loop closed with requests pending left them unanswerable: forget them.
            self._pending.clear()
            self._fd = self._client._event_fd()
            loop.add_reader(self._fd, self._poll)
            self._loop = loop
            self._timer = loop.call_later(_DEADLINE_POLL_S, self._tick)
            return loop

    def _unbind_if_idle(self) -> None:
        with self._lock:
            if self._pending or self._loop is None:
                return
            if not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
            if self._timer is not None:
                self._timer.cancel()
            self._loop = None
            self._timer = None

    def _tick(self) -> None:
        self._poll()
        if self._loop is not None:
            self._timer = self._loop.call_later(_DEADLINE_POLL_S, self._tick)

    def _poll(self) -> None:
        if self._client.closed:
            return
        for token, outcome in self._client._poll():
            future = self._pending.pop(token, None)
            if future is None or future.done():
                continue
            if isinstance(outcome, Error):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self._unbind_if_idle()


