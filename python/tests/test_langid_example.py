"""examples/langid: the batched scoring answers as py3langid does one text at a time, and the
worker serves it end to end, through the daemon and through batchd-http."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import batchd
import py3langid
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langid"
sys.path.insert(0, str(EXAMPLE))

from langid_batch import BatchIdentifier  # noqa: E402
from sentences import sentences  # noqa: E402


def test_batched_scoring_answers_as_the_package_one_by_one() -> None:
    texts = sentences(1000) + ["", "   ", "12345", "x", "ÄÖÜ", "日本"]
    expected = [py3langid.classify(t)[0] for t in texts]
    identifier = BatchIdentifier()
    assert identifier.classify(texts) == expected
    for size in (1, 7, 64, 256):  # any batch size gives the same answers
        got: list[str] = []
        for start in range(0, len(texts), size):
            got += identifier.classify(texts[start:start + size])
        assert got == expected
    assert len(set(expected)) >= 10  # the sentences do span many languages


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def langid_worker(start_daemon: Callable[..., str]) -> Iterator[str]:
    path = start_daemon("--backend", "workers", "--max-wait-ms", "2")
    worker = subprocess.Popen([sys.executable, str(EXAMPLE / "worker.py"), "--socket", path],
                              stdout=subprocess.PIPE, env=os.environ.copy())
    assert worker.stdout is not None
    assert worker.stdout.readline().startswith(b"langid worker ")
    yield path
    worker.terminate()
    assert worker.wait(timeout=20) == 0


def test_the_worker_answers_through_the_daemon(langid_worker: str) -> None:
    texts = sentences(1000)
    with batchd.Client(langid_worker) as client:
        assert client.submit_many(texts, timeout=60) == [py3langid.classify(t)[0] for t in texts]
        device = client.status()["devices"][0]
        assert device["worker"]["name"] == "langid"


def test_the_worker_answers_over_http(langid_worker: str) -> None:
    binary = os.environ.get("BATCHD_HTTP_BIN")
    if not binary:
        pytest.fail("BATCHD_HTTP_BIN is not set (run the tests through meson test)")
    port = _free_port()
    http = subprocess.Popen([binary, "--listen", f"127.0.0.1:{port}", "--socket", langid_worker, "--log-level", "warn"])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as ready:
                    if ready.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "batchd-http did not become ready"
            time.sleep(0.05)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/batchstring",
                                         data=json.dumps({"input": "Bonjour tout le monde"}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read()) == {"output": "fr"}
    finally:
        http.terminate()
        assert http.wait(timeout=30) == 0
