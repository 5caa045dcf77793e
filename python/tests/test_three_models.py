"""One daemon serving three models at once, each answered right from every client and protocol:
`batchstring` (the cpu backend, in the daemon), `langid` (examples/langid's Python worker) and
`reversed` (batchd-worker on the sim backend, which answers each string's code points reversed).
The C++ client (batchd-send), Python, /v1/models/NAME, tritonclient over HTTP and gRPC and
perf_analyzer -m NAME; the repository index and each model's readiness; an unknown model over
every protocol; and workers refused for a model they may not serve."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import batchd
import numpy as np
import py3langid
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import run_perf_analyzer, sha256_hex, sim_answer
from tritonclient.utils import InferenceServerException

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langid"
sys.path.insert(0, str(EXAMPLE))

from sentences import sentences  # noqa: E402

# Each model's answer to a string.
EXPECT: dict[str, Callable[[str], str]] = {
    "batchstring": sha256_hex,
    "langid": lambda text: py3langid.classify(text)[0],
    "reversed": sim_answer,
}
TEXTS = sentences(40) + ["héllo wörld", "日本語のテキスト", ""]


def _binary(variable: str) -> str:
    binary = os.environ.get(variable)
    if not binary:
        pytest.fail(f"{variable} is not set (run the tests through meson test)")
    return binary


def _port_file_address(process: subprocess.Popen[bytes], port_file: str, name: str) -> str:
    deadline = time.monotonic() + 20
    while True:
        assert process.poll() is None, f"{name} exited with {process.returncode} at start"
        assert time.monotonic() < deadline, f"{name} did not write its port within 20 s"
        try:
            with open(port_file) as f:
                return f"127.0.0.1:{int(f.read().strip())}"
        except (OSError, ValueError):
            time.sleep(0.02)


class Served:
    """The daemon, its two workers and both front-ends; stopped in reverse order, each cleanly."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.socket = os.path.join(directory, "batchd.sock")
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._start("batchd", [_binary("BATCHD_BIN"), "--socket", self.socket, "--log-level", "warn",
                               "--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "2",
                               "--model", "langid:backend=workers,version=2",
                               "--model", "reversed:backend=workers,version=3"])
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            assert time.monotonic() < deadline, "batchd did not start listening within 10 s"
            time.sleep(0.01)
        langid = self._start("langid worker", [sys.executable, str(EXAMPLE / "worker.py"), "--socket", self.socket],
                             stdout=subprocess.PIPE)
        assert langid.stdout is not None and langid.stdout.readline().startswith(b"langid worker ")
        self._start("batchd-worker", [_binary("BATCHD_WORKER_BIN"), "--socket", self.socket, "--backend", "sim",
                                      "--sim-fixed-us", "200", "--sim-per-item-us", "2", "--model", "reversed",
                                      "--version", "3", "--log-level", "warn"])
        http_port = os.path.join(directory, "http.port")
        http = self._start("batchd-http", [_binary("BATCHD_HTTP_BIN"), "--listen", "127.0.0.1:0", "--port-file",
                                           http_port, "--socket", self.socket, "--log-level", "warn",
                                           "--model-control"])
        self.http = _port_file_address(http, http_port, "batchd-http")
        grpc_port = os.path.join(directory, "grpc.port")
        grpc = self._start("batchd-grpc", [_binary("BATCHD_GRPC_BIN"), "--listen", "127.0.0.1:0", "--port-file",
                                           grpc_port, "--socket", self.socket, "--log-level", "warn",
                                           "--model-control"])
        self.grpc = _port_file_address(grpc, grpc_port, "batchd-grpc")
        # Ready once both workers are attached and the front-ends have read the daemon's table
        # (at most a second old).
        deadline = time.monotonic() + 30
        with triton_http.InferenceServerClient(self.http) as client:
            while not all(client.is_model_ready(name) for name in EXPECT):
                assert time.monotonic() < deadline, "the three models were not ready within 30 s"
                time.sleep(0.05)

    def _start(self, name: str, args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(args, env=os.environ.copy(), **kwargs)  # type: ignore[call-overload]
        self.processes.append((name, process))
        return process

    def stop(self) -> None:
        for name, process in reversed(self.processes):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0, f"{name} exited with {process.returncode} on SIGTERM"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    directory = tempfile.mkdtemp(prefix="batchd-3m-")
    served = Served(directory)
    try:
        yield served
    finally:
        served.stop()
        for entry in os.listdir(directory):
            os.unlink(os.path.join(directory, entry))
        os.rmdir(directory)


@pytest.mark.parametrize("model", list(EXPECT))
def test_the_cpp_client_answers_each_model(served: Served, model: str) -> None:
    for text in TEXTS[:5]:
        run = subprocess.run([_binary("BATCHD_SEND_BIN"), "--socket", served.socket, "--model", model, text],
                             capture_output=True, timeout=30)
        assert run.returncode == 0, run.stderr
        assert run.stdout.decode() == EXPECT[model](text) + "\n"


@pytest.mark.parametrize("model", list(EXPECT))
def test_python_answers_each_model(served: Served, model: str) -> None:
    with batchd.Client(served.socket) as client:
        assert client.submit_many(TEXTS, timeout=30, model=model) == [EXPECT[model](t) for t in TEXTS]
        assert client.submit(TEXTS[0], model=model) == EXPECT[model](TEXTS[0])


@pytest.mark.parametrize("model", list(EXPECT))
def test_v1_answers_each_model_by_name(served: Served, model: str) -> None:
    for text in TEXTS[:8]:
        request = urllib.request.Request(f"http://{served.http}/v1/models/{model}",
                                         data=json.dumps({"input": text}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.load(answer) == {"output": EXPECT[model](text)}


@pytest.mark.parametrize("model", list(EXPECT))
def test_tritonclient_http_and_grpc_answer_each_model(served: Served, model: str) -> None:
    data = np.array([t.encode() for t in TEXTS], dtype=np.object_)
    expected = [EXPECT[model](t) for t in TEXTS]
    with triton_http.InferenceServerClient(served.http) as client:
        tensor = triton_http.InferInput("INPUT", [len(TEXTS)], "BYTES")
        tensor.set_data_from_numpy(data, binary_data=True)
        result = client.infer(model, [tensor])
        assert [x.decode() for x in result.as_numpy("OUTPUT")] == expected
        assert result.get_response()["model_name"] == model
    with triton_grpc.InferenceServerClient(served.grpc) as client:
        tensor = triton_grpc.InferInput("INPUT", [len(TEXTS)], "BYTES")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor])
        assert [x.decode() for x in result.as_numpy("OUTPUT")] == expected
        assert result.get_response().model_name == model


def test_repository_index_and_ready_states(served: Served) -> None:
    versions = {"batchstring": "1", "langid": "2", "reversed": "3"}
    with triton_http.InferenceServerClient(served.http) as client:
        index = client.get_model_repository_index()
        assert [(m["name"], m["version"], m["state"]) for m in index] == \
            [(name, versions[name], "READY") for name in EXPECT]
        for name, version in versions.items():
            assert client.is_model_ready(name) and client.is_model_ready(name, version)
    with triton_grpc.InferenceServerClient(served.grpc) as client:
        index = client.get_model_repository_index(as_json=True)["models"]
        assert [(m["name"], m["version"], m["state"]) for m in index] == \
            [(name, versions[name], "READY") for name in EXPECT]
        for name, version in versions.items():
            assert client.is_model_ready(name) and client.is_model_ready(name, version)
    with batchd.Client(served.socket) as client:
        status = client.status()
        assert [(m["name"], m["state"]) for m in status["models"]] == [(name, "ready") for name in EXPECT]
        for model in status["models"]:  # every model answered requests by now, none failed
            assert model["requests_ok"] > 0 and model["requests_failed"] == 0, model
            assert model["inferences"] > 0 and model["batches"] > 0 and model["compute_ns"] > 0, model
        assert sorted((w["model"], w["name"]) for w in status["attached_workers"]) == \
            [("langid", "langid"), ("reversed", "reversed")]


def test_statistics_count_each_model_apart(served: Served) -> None:
    """Each model's statistics count its own inferences alone; queue and compute times are the
    daemon's for that model."""
    data = np.array([t.encode() for t in TEXTS[:4]], dtype=np.object_)
    with triton_http.InferenceServerClient(served.http) as client:
        before = {m["name"]: m for m in client.get_inference_statistics()["model_stats"]}
        tensor = triton_http.InferInput("INPUT", [4], "BYTES")
        tensor.set_data_from_numpy(data)
        client.infer("reversed", [tensor])
        client.infer("reversed", [tensor])
        after = {m["name"]: m for m in client.get_inference_statistics()["model_stats"]}
        assert after["reversed"]["inference_count"] == before["reversed"]["inference_count"] + 8
        assert after["reversed"]["execution_count"] == before["reversed"]["execution_count"] + 2
        for other in ("batchstring", "langid"):
            assert after[other]["inference_count"] == before[other]["inference_count"]
        stats = after["reversed"]["inference_stats"]
        assert stats["queue"]["ns"] > 0 and stats["compute_infer"]["ns"] > 0
        assert stats["compute_infer"]["count"] == stats["success"]["count"]
    with triton_grpc.InferenceServerClient(served.grpc) as client:
        before = {m.name: m for m in client.get_inference_statistics().model_stats}
        tensor = triton_grpc.InferInput("INPUT", [4], "BYTES")
        tensor.set_data_from_numpy(data)
        client.infer("langid", [tensor])
        after = {m.name: m for m in client.get_inference_statistics().model_stats}
        assert after["langid"].inference_count == before["langid"].inference_count + 4
        for other in ("batchstring", "reversed"):
            assert after[other].inference_count == before[other].inference_count
        assert after["langid"].inference_stats.queue.ns > 0
        assert after["langid"].inference_stats.compute_infer.ns > 0


def test_an_unknown_model_gets_a_clear_error_everywhere(served: Served) -> None:
    served_list = "batchstring, langid, reversed"
    with batchd.Client(served.socket) as client:
        with pytest.raises(batchd.Error, match="nope"):
            client.submit("x", model="nope")
        assert client.submit("x") == sha256_hex("x")  # nothing else lost
    run = subprocess.run([_binary("BATCHD_SEND_BIN"), "--socket", served.socket, "--model", "nope", "x"],
                         capture_output=True, timeout=30)
    assert run.returncode != 0
    assert b"nope" in run.stderr and served_list.encode() in run.stderr.replace(b"'", b"")
    request = urllib.request.Request(f"http://{served.http}/v1/models/nope", data=b'{"input": "x"}',
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 404
    assert "nope" in refused.value.read().decode()
    tensor = triton_http.InferInput("INPUT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
    with triton_http.InferenceServerClient(served.http) as client:
        with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
            client.infer("nope", [tensor])
        assert not client.is_model_ready("nope")
    tensor = triton_grpc.InferInput("INPUT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
    with triton_grpc.InferenceServerClient(served.grpc) as client:
        with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
            client.infer("nope", [tensor])
        assert not client.is_model_ready("nope")


def test_a_worker_for_a_model_it_may_not_serve_is_refused(served: Served) -> None:
    with pytest.raises(batchd.Error, match="model batchstring runs the cpu backend inside the daemon"):
        batchd.Worker(served.socket, model="batchstring", attach_timeout=2)
    with pytest.raises(batchd.Error, match="no model named nope here; workers serve models langid, reversed"):
        batchd.Worker(served.socket, model="nope", attach_timeout=2)
    run = subprocess.run([_binary("BATCHD_WORKER_BIN"), "--socket", served.socket, "--model", "batchstring",
                          "--once"], capture_output=True, timeout=30)
    assert run.returncode != 0
    assert b"workers serve models langid, reversed" in run.stdout + run.stderr


@pytest.mark.parametrize("model", list(EXPECT))
def test_perf_analyzer_picks_each_model(served: Served, model: str) -> None:
    # Correctness, not speed: three short windows, any stability (test_oip_grpc.py says why).
    report = run_perf_analyzer(["-m", model, "-u", served.grpc, "-i", "grpc", "--async", "--concurrency-range",
                                "8", "--measurement-interval", "1500", "--max-trials", "3", "-s", "1000"])
    client_count = int(re.search(r"Client:\s+Request count: (\d+)", report).group(1))
    assert client_count > 0, report


def _until(predicate: Callable[[], bool], what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {seconds} s"
        time.sleep(0.05)


def test_tritonclient_unloads_and_loads_a_model(served: Served) -> None:
    """Last: Triton's explicit model control, through tritonclient over both protocols. The other
    models keep answering throughout."""
    data = np.array([t.encode() for t in TEXTS[:3]], dtype=np.object_)
    with triton_grpc.InferenceServerClient(served.grpc) as grpc_client, \
            triton_http.InferenceServerClient(served.http) as http_client:
        grpc_client.unload_model("batchstring")
        _until(lambda: not http_client.is_model_ready("batchstring"), "batchstring not ready after its unload")
        index = {m["name"]: m for m in http_client.get_model_repository_index()}
        assert index["batchstring"]["state"] == "UNAVAILABLE"
        assert index["batchstring"]["reason"] == "model batchstring is unloaded"
        tensor = triton_http.InferInput("INPUT", [3], "BYTES")
        tensor.set_data_from_numpy(data, binary_data=True)
        with pytest.raises(InferenceServerException, match="model batchstring is unloaded"):
            http_client.infer("batchstring", [tensor])
        for model in ("langid", "reversed"):  # untouched
            assert [x.decode() for x in http_client.infer(model, [tensor]).as_numpy("OUTPUT")] == \
                [EXPECT[model](t) for t in TEXTS[:3]]
        with pytest.raises(InferenceServerException, match="no model named nope"):
            http_client.load_model("nope")
        http_client.load_model("batchstring")
        _until(lambda: grpc_client.is_model_ready("batchstring"), "batchstring ready after its load")
        tensor = triton_grpc.InferInput("INPUT", [3], "BYTES")
        tensor.set_data_from_numpy(data)
        assert [x.decode() for x in grpc_client.infer("batchstring", [tensor]).as_numpy("OUTPUT")] == \
            [sha256_hex(t) for t in TEXTS[:3]]
