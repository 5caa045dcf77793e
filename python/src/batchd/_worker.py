"""batchd.Worker: a Python model served to a batchd daemon started with --backend workers.

    def model(texts: list[str]) -> list[str]:
        return [t.upper() for t in texts]

    batchd.Worker(name="upper", version="1").serve(model)

The model function takes a whole batch and returns one output per input, in order. An exception
fails that batch; the daemon then splits it until the input that fails is alone, and only that
input's caller gets the error. If this process dies or hangs, the daemon runs its batches on
another worker. SIGTERM (or SIGINT) stops serve() gracefully: the batches it runs are answered
first, and the daemon sends it no new ones.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Awaitable, Callable, Literal, Sequence, Union

from . import _batchd

Output = Union[str, bytes, bytearray, memoryview]
Inputs = Literal["str", "bytes", "memoryview"]


class Worker(_batchd.NativeWorker):
    """Attaches to the daemon in the worker role at construction.

    socket: the daemon's socket (None: as a Client's default). name, version: shown in the
    daemon's logs, status and metrics. concurrency: batches run at once, each on its own thread
    (the model function is then called from several threads; it holds the GIL while it runs).
    max_inputs, max_bytes: the largest batch this worker takes. attach_timeout: seconds to keep
    trying while no daemon is there. spin_us: how long a thread spins for the next batch before
    it sleeps. Raises a batchd.Error subclass when it cannot attach (PermissionDenied when this
    user may not attach as a worker: see batchd --worker-allow-uid).
    """

    def __init__(self, socket: str | os.PathLike[str] | None = None, *, name: str = "python",
                 version: str = "0", concurrency: int = 1, max_inputs: int = 4096,
                 max_bytes: int = 64 << 20, attach_timeout: float = 5.0, spin_us: float = 50.0,
                 model: str | None = None) -> None:
        # model: the model served, by name (docs/MODELS.md); the name the daemon knows it by.
        if model is not None:
            name = model
        super().__init__(None if socket is None else os.fspath(socket), name, version, concurrency,
                         max_inputs, max_bytes, attach_timeout, spin_us)

    def serve(self, fn: Callable[[list[str]], Sequence[Output]], *, inputs: Inputs = "str") -> bool:
        """Serves batches with fn until stop() or a signal (True) or until the daemon goes (False).

        inputs: "str" (decoded UTF-8), "bytes", or "memoryview" (views of the daemon's shared
        memory, valid only while fn runs: no copy). Outputs may be str (sent as UTF-8) or any
        bytes-like object.
        """
        return self._serve_with_signals(lambda: self._serve(fn, inputs))

    def serve_bytes(self, fn: Callable[[list[bytes]], Sequence[Output]]) -> bool:
        """serve() with the inputs as bytes."""
        return self.serve(fn, inputs="bytes")  # type: ignore[arg-type]

    async def serve_async(self, fn: Callable[[list[str]], Awaitable[Sequence[Output]]], *,
                          inputs: Inputs = "str") -> bool:
        """serve() for a coroutine function, run on the calling event loop.

        Each batch waits (without the GIL) on a worker thread while its coroutine runs on this
        loop, so a model that awaits I/O or other services keeps the loop free. Cancelling the
        task that awaits this stops the worker gracefully.
        """
        loop = asyncio.get_running_loop()

        def run_batch(batch: list[str]) -> Sequence[Output]:
            return asyncio.run_coroutine_threadsafe(fn(batch), loop).result()  # type: ignore[arg-type]

        serving = loop.run_in_executor(None, self._serve, run_batch, inputs)
        try:
            return await asyncio.shield(serving)
        except asyncio.CancelledError:
            self.stop()
            await serving
            raise

    def _serve_with_signals(self, serve: Callable[[], bool]) -> bool:
        # Python runs signal handlers on the main thread between bytecodes, which never happens
        # while that thread waits in native code: serve on another thread, and let this one wait
        # in short joins so that SIGTERM and SIGINT reach stop().
        if threading.current_thread() is not threading.main_thread():
            return serve()
        result: list[bool] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                result.append(serve())
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                failure.append(e)

        previous = {sig: signal.signal(sig, lambda *_: self.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
        thread = threading.Thread(target=run, name="batchd-worker", daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.1)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if failure:
            raise failure[0]
        return result[0]
