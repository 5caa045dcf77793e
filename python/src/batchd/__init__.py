"""batchd: the Python client of the batchd local batching daemon (over libbatchd-client).

    client = batchd.Client()                     # the daemon's default socket
    client.submit("hello")                       # -> its answer, a str
    await client.submit_async("hello")           # the same, from asyncio
    batchd.Worker().serve(model)                 # serve a model: model(list[str]) -> list[str]
    batchd.jobs.JobsClient(url).run("hello")     # an asynchronous job through batchd-http

Every failure raises a subclass of batchd.Error (see _errors.py). Threads: any number of threads
may call submit() and submit_many() on one Client at once (each waits without the GIL).
Asynchronous requests belong to one event loop at a time per Client.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Iterable, Literal, Sequence, Union, overload

from . import _batchd, jobs
from ._aio import AsyncDriver
from ._worker import Worker
from ._errors import (BY_CODE, BackendError, BackendUnavailable, Cancelled, DaemonUnavailable, Error,
                      InvalidUtf8, Overloaded, PermissionDenied, ProtocolError, Timeout, TooLarge,
                      TooManyClients, UnknownModel)

__all__ = [
    "Client", "Error", "Timeout", "Overloaded", "TooLarge", "InvalidUtf8", "DaemonUnavailable",
    "BackendError", "BackendUnavailable", "Cancelled", "ProtocolError", "PermissionDenied",
    "TooManyClients", "UnknownModel", "Priority", "DEFAULT_TIMEOUT", "Worker", "jobs",
]

if [cls.code for cls in BY_CODE] != _batchd.error_code_names():
    raise ImportError("batchd: the exception classes do not match the client library's error codes "
                      f"{_batchd.error_code_names()}: the package was built from mismatched sources")
_batchd._set_error_classes(list(BY_CODE))
for _cls in (Error, *BY_CODE):
    _cls.__module__ = __name__  # shown as batchd.Timeout, where users catch it

Priority = Literal["high", "normal", "low"]
DEFAULT_TIMEOUT = 10.0  # seconds; the native submit() has the same default

Text = Union[str, bytes]


class Client(_batchd.NativeClient):
    """A connection to a batchd daemon and its shared-memory segment.

    socket: the daemon's socket path (None: $XDG_RUNTIME_DIR/batchd/batchd.sock, or
    /run/batchd/batchd.sock as root). connect_timeout: seconds to keep trying to reach a daemon
    that is not there yet; after that, DaemonUnavailable. If the daemon restarts, pending requests
    wait for the new one. Usable as a context manager (close() detaches).

    submit(text, timeout=10.0, priority=None, model=None) -> str comes from the native class: it
    sends one request and waits (without the GIL) up to `timeout` seconds for its answer. `model`
    names the model (None: the daemon's default, batchstring) in every submit method; a name the
    daemon does not serve raises UnknownModel at once.
    """

    def __init__(self, socket: str | os.PathLike[str] | None = None, connect_timeout: float = 2.0) -> None:
        super().__init__(None if socket is None else os.fspath(socket), connect_timeout)
        self._aio = AsyncDriver(self)

    @overload
    def submit_many(self, texts: Sequence[Text], timeout: float = ..., priority: Priority | None = ...,
                    return_exceptions: Literal[False] = ..., model: str | None = ...,
                    traceparent: str | None = ...) -> list[str]: ...

    @overload
    def submit_many(self, texts: Sequence[Text], timeout: float = ..., priority: Priority | None = ...,
                    *, return_exceptions: Literal[True], model: str | None = ...,
                    traceparent: str | None = ...) -> list[str | Error]: ...

    def submit_many(self, texts: Sequence[Text], timeout: float = DEFAULT_TIMEOUT,
                    priority: Priority | None = None, return_exceptions: bool = False,
                    model: str | None = None, traceparent: str | None = None) -> Any:
        """Sends the texts as one submission and waits for every answer, in order.

        With return_exceptions, a failed request's Error stands in its place; without, the first
        failure (by position) is raised once all are settled.
        """
        return _settled(self._submit_many(_sequence(texts), timeout, priority, model, traceparent),
                        return_exceptions)

    def submit_async(self, text: Text, timeout: float = DEFAULT_TIMEOUT,
                     priority: Priority | None = None, model: str | None = None) -> asyncio.Future[str]:
        """Sends one request now; the future (of the running loop) resolves to its answer.

        A refusal (TooLarge, InvalidUtf8, Overloaded, ...) is raised at once. Cancelling the
        future withdraws the request if the daemon has not taken it yet.
        """
        return self._aio.submit(text, timeout, priority, model)

    async def submit_many_async(self, texts: Sequence[Text], timeout: float = DEFAULT_TIMEOUT,
                                priority: Priority | None = None,
                                return_exceptions: bool = False, model: str | None = None) -> list[Any]:
        """submit_many for asyncio: one submission, answers in order, errors as submit_many's."""
        futures = self._aio.submit_many(_sequence(texts), timeout, priority, model)
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        return _settled(outcomes, return_exceptions)

    def close(self) -> None:
        """Detaches from the daemon; pending asynchronous requests fail with Cancelled."""
        if not self.closed:
            self._aio.close()
            super().close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _sequence(texts: Iterable[Text]) -> Sequence[Text]:
    if isinstance(texts, (str, bytes)):
        raise TypeError("submit_many takes a sequence of texts, not one text")
    return texts if isinstance(texts, (list, tuple)) else list(texts)


def _settled(outcomes: list[Any], return_exceptions: bool) -> list[Any]:
    if not return_exceptions:
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
    return outcomes
