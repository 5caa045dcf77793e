"""batchd-http's Open Inference Protocol routes (/v2), driven by Triton's own clients from PyPI:
tritonclient.http, its asyncio client and perf_analyzer. They check the front-end against what
those clients actually send and expect, which a hand-written client would only guess at."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
import struct
import time
import urllib.request
from typing import Callable, Iterator

import numpy as np
import pytest
import tritonclient.http as triton
import tritonclient.http.aio as triton_aio
from conftest import run_perf_analyzer, sha256_hex, sim_answer
from tritonclient.utils import InferenceServerException

MODEL = "batchstring"
# Below batchd-http's default (1024), so the configuration shows the flag's value and not a default.
MAX_STRINGS = 1000
# Quotes, backslashes, control characters and multi-byte UTF-8 go through JSON escaping and the
# binary framing; the empty string is a zero-length BYTES element.
ODD_STRINGS = ["héllo wörld", "日本語のテキスト", "emoji 🙂🚀", "", 'quote " back\\slash', "tab\tnew\nline\x01",
               "Ελληνικά", "x" * 500]


def _strings(count: int) -> list[str]:
    """`count` distinct strings of varied lengths, some of them not ASCII."""
    return [f"{i}:" + ODD_STRINGS[i % len(ODD_STRINGS)] + "é" * (i % 37) for i in range(count)]


@pytest.fixture
def url(start_daemon: Callable[..., str], start_http: Callable[..., str]) -> str:
    """batchd-http over a cpu daemon, whose answer to each string is its SHA-256 in hex."""
    return start_http(start_daemon("--backend", "cpu"), "--max-infer-strings", str(MAX_STRINGS))


@pytest.fixture
def client(url: str) -> Iterator[triton.InferenceServerClient]:
    with triton.InferenceServerClient(url) as c:
        yield c


def _input(strings: list[str], binary: bool) -> triton.InferInput:
    tensor = triton.InferInput("INPUT", [len(strings), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[s.encode()] for s in strings], dtype=np.object_), binary_data=binary)
    return tensor


def _outputs(binary: bool) -> list[triton.InferRequestedOutput]:
    return [triton.InferRequestedOutput("OUTPUT", binary_data=binary)]


def _check_answers(result: triton.InferResult, strings: list[str], expect: Callable[[str], str],
                   binary: bool) -> None:
    """`binary`: whether the output was asked for as binary data, which tritonclient does for every
    output when it is given no `outputs`."""
    output = result.get_response()["outputs"][0]
    assert output["name"] == "OUTPUT" and output["datatype"] == "BYTES"
    assert output["shape"] == [len(strings), 1]
    # The output comes the way it was asked for, whichever way the input came.
    assert ("binary_data_size" in output.get("parameters", {})) == binary
    assert ("data" in output) == (not binary)
    answers = result.as_numpy("OUTPUT")
    assert answers.shape == (len(strings), 1)
    got = [a.decode() if isinstance(a, bytes) else a for a in answers.flatten()]
    assert got == [expect(s) for s in strings]


def _raw_post(address: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    """POSTs exactly `body`, for requests that tritonclient refuses to build."""
    host, port = address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _metric(address: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} is not in /metrics"
    return float(match.group(1))


def _stats(client: triton.InferenceServerClient) -> dict:
    return client.get_inference_statistics(MODEL)["model_stats"][0]


# --- metadata, health, configuration, statistics -------------------------------------------------

def test_health_and_readiness(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(MODEL)
    assert client.is_model_ready(MODEL, "1")
    assert not client.is_model_ready(MODEL, "2")
    assert not client.is_model_ready("no_such_model")


def test_server_and_model_metadata(client: triton.InferenceServerClient) -> None:
    server = client.get_server_metadata()
    assert server["name"] == "batchd"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", server["version"])
    assert {"binary_tensor_data", "model_configuration", "statistics"} <= set(server["extensions"])
    model = client.get_model_metadata(MODEL)
    assert model == client.get_model_metadata(MODEL, "1")
    assert model["name"] == MODEL and model["versions"] == ["1"]
    assert model["inputs"] == [{"name": "INPUT", "datatype": "BYTES", "shape": [-1, 1]}]
    assert model["outputs"] == [{"name": "OUTPUT", "datatype": "BYTES", "shape": [-1, 1]}]


def test_model_config_gives_the_front_ends_string_limit(client: triton.InferenceServerClient) -> None:
    config = client.get_model_config(MODEL)
    assert config["name"] == MODEL
    assert config["max_batch_size"] == MAX_STRINGS
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("INPUT", "TYPE_STRING", [1])]
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [("OUTPUT", "TYPE_STRING", [1])]


def test_statistics_count_each_inference_and_its_strings(client: triton.InferenceServerClient) -> None:
    before = _stats(client)
    assert (before["name"], before["version"]) == (MODEL, "1")
    client.infer(MODEL, [_input(_strings(5), binary=False)])
    client.infer(MODEL, [_input(_strings(3), binary=True)])
    after = _stats(client)
    assert after["inference_count"] == before["inference_count"] + 8  # strings
    assert after["execution_count"] == before["execution_count"] + 2  # requests
    success = after["inference_stats"]["success"]
    assert success["count"] == before["inference_stats"]["success"]["count"] + 2
    assert success["ns"] > before["inference_stats"]["success"]["ns"]
    # perf_analyzer finds the model's version by this count rising.
    assert after["inference_stats"]["queue"]["count"] == before["inference_stats"]["queue"]["count"] + 2
    assert after["last_inference"] > 0
    assert abs(after["last_inference"] / 1000 - time.time()) < 60  # milliseconds since the epoch


# --- inference -----------------------------------------------------------------------------------

@pytest.mark.parametrize("binary_in", [False, True], ids=["json_in", "binary_in"])
@pytest.mark.parametrize("binary_out", [False, True], ids=["json_out", "binary_out"])
@pytest.mark.parametrize("count", [1, MAX_STRINGS])
def test_infer_answers_each_string_in_order(client: triton.InferenceServerClient, count: int, binary_in: bool,
                                            binary_out: bool) -> None:
    strings = _strings(count)
    result = client.infer(MODEL, [_input(strings, binary_in)], outputs=_outputs(binary_out), request_id="req-7")
    assert result.get_response()["id"] == "req-7"
    _check_answers(result, strings, sha256_hex, binary_out)


def test_infer_takes_a_flat_shape_and_keeps_it(client: triton.InferenceServerClient) -> None:
    tensor = triton.InferInput("INPUT", [3], "BYTES")
    tensor.set_data_from_numpy(np.array([b"a", "ü".encode(), b""], dtype=np.object_))
    result = client.infer(MODEL, [tensor], outputs=_outputs(False))
    assert result.get_response()["outputs"][0]["shape"] == [3]
    assert list(result.as_numpy("OUTPUT")) == [sha256_hex("a"), sha256_hex("ü"), sha256_hex("")]


def test_infer_against_version_1_by_name(client: triton.InferenceServerClient) -> None:
    result = client.infer(MODEL, [_input(["v"], True)], model_version="1", outputs=_outputs(True))
    assert result.get_response()["model_version"] == "1"
    _check_answers(result, ["v"], sha256_hex, binary=True)


def test_async_infer_with_many_in_flight(url: str) -> None:
    batches = [_strings(40)[i:] + [f"batch {i}"] for i in range(64)]
    with triton.InferenceServerClient(url, concurrency=16) as client:
        pending = [client.async_infer(MODEL, [_input(strings, i % 2 == 0)], outputs=_outputs(i % 3 == 0))
                   for i, strings in enumerate(batches)]
        for i, (request, strings) in enumerate(zip(pending, batches)):
            _check_answers(request.get_result(timeout=30), strings, sha256_hex, binary=i % 3 == 0)


def test_aio_client_with_many_in_flight(url: str) -> None:
    batches = [[f"aio {i}-{j} ✓" for j in range(i % 50 + 1)] for i in range(200)]

    async def run() -> list[triton.InferResult]:
        async with triton_aio.InferenceServerClient(url, conn_limit=32) as client:
            assert await client.is_server_ready()
            assert await client.is_model_ready(MODEL)
            return await asyncio.gather(*(client.infer(MODEL, [_input(strings, i % 2 == 1)],
                                                       outputs=_outputs(i % 4 < 2))
                                          for i, strings in enumerate(batches)))

    results = asyncio.run(run())
    for i, (result, strings) in enumerate(zip(results, batches)):
        _check_answers(result, strings, sha256_hex, binary=i % 4 < 2)


# --- errors: each with the protocol's status and its {"error": "..."} body -------------------------

def _refusal(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    assert caught.value.message(), "the error body's message is empty"
    return caught.value


def test_unknown_model_or_version_is_404(client: triton.InferenceServerClient, url: str) -> None:
    tensor = [_input(["x"], False)]
    assert _refusal(lambda: client.infer("no_such_model", tensor)).status() == "404"
    assert _refusal(lambda: client.infer(MODEL, tensor, model_version="2")).status() == "404"
    assert _refusal(lambda: client.get_model_metadata("no_such_model")).status() == "404"
    assert _refusal(lambda: client.get_model_config(MODEL, "2")).status() == "404"
    status, body = _raw_post(url, "/v2/models/no_such_model/infer", b"{}", {"Content-Type": "application/json"})
    assert status == 404 and set(body) == {"error"} and "no_such_model" in body["error"]


def test_wrong_datatype_is_400(client: triton.InferenceServerClient) -> None:
    tensor = triton.InferInput("INPUT", [2, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    refusal = _refusal(lambda: client.infer(MODEL, [tensor]))
    assert refusal.status() == "400" and "BYTES" in refusal.message()


@pytest.mark.parametrize("shape", [[2, 2], [1, 1, 1], [-1, 1]])
def test_wrong_shape_is_400(client: triton.InferenceServerClient, shape: list[int]) -> None:
    data_shape = [abs(d) for d in shape]  # tritonclient checks the data against a shape it can hold
    tensor = triton.InferInput("INPUT", data_shape, "BYTES")
    tensor.set_data_from_numpy(np.full(data_shape, b"a", dtype=np.object_), binary_data=False)
    tensor.set_shape(shape)  # and sends this one
    refusal = _refusal(lambda: client.infer(MODEL, [tensor]))
    assert refusal.status() == "400" and "'INPUT'" in refusal.message()


def test_more_strings_than_max_batch_size_is_400(client: triton.InferenceServerClient) -> None:
    refusal = _refusal(lambda: client.infer(MODEL, [_input(_strings(MAX_STRINGS + 1), True)]))
    assert refusal.status() == "400" and str(MAX_STRINGS) in refusal.message()


def test_unknown_output_is_400(client: triton.InferenceServerClient) -> None:
    refusal = _refusal(lambda: client.infer(MODEL, [_input(["x"], True)],
                                            outputs=[triton.InferRequestedOutput("LOGITS")]))
    assert refusal.status() == "400" and "LOGITS" in refusal.message()


def _binary_request(claimed_size: int, data: bytes, header_length_delta: int) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [1, 1],
                                     "parameters": {"binary_data_size": claimed_size}}]}).encode()
    return header + data, {"Content-Type": "application/octet-stream",
                           "Inference-Header-Content-Length": str(len(header) + header_length_delta)}


GOOD_ELEMENT = struct.pack("<I", 4) + b"abcd"  # one BYTES element: its little-endian length, then it
# Each: binary_data_size as claimed, the binary data sent, how far Inference-Header-Content-Length
# is off the JSON header's true length, and what the error must say (so each hits its own check).
MALFORMED_BINARY = {
    "element_overruns": (8, struct.pack("<I", 255) + b"abcd", 0, "claims 255 bytes"),
    "length_prefix_cut": (3, b"\x04\x00\x00", 0, "4-byte length"),
    "bytes_left_over": (9, GOOD_ELEMENT + b"!", 0, "1 bytes are left"),
    "size_overruns_body": (100, GOOD_ELEMENT, 0, "claims 100 bytes"),
    "header_length_past_body": (8, GOOD_ELEMENT, 1000, "Inference-Header-Content-Length"),
}


@pytest.mark.parametrize("case", MALFORMED_BINARY)
def test_malformed_binary_tensor_is_400(url: str, case: str) -> None:
    claimed_size, data, header_length_delta, says = MALFORMED_BINARY[case]
    status, answer = _raw_post(url, f"/v2/models/{MODEL}/infer",
                               *_binary_request(claimed_size, data, header_length_delta))
    assert status == 400, answer
    assert set(answer) == {"error"} and says in answer["error"]
    # The well-formed request the cases were cut from is answered: the refusals are the faults'.
    status, answer = _raw_post(url, f"/v2/models/{MODEL}/infer", *_binary_request(8, GOOD_ELEMENT, 0))
    assert status == 200 and answer["outputs"][0]["data"] == [sha256_hex("abcd")]


def test_input_over_the_daemons_limit_is_400(start_daemon: Callable[..., str],
                                            start_http: Callable[..., str]) -> None:
    address = start_http(start_daemon("--backend", "cpu", "--max-input-bytes", "1024"))
    with triton.InferenceServerClient(address) as client:
        for binary in (False, True):
            refusal = _refusal(lambda: client.infer(MODEL, [_input(["ok", "y" * 2000], binary)]))
            assert refusal.status() == "400" and "1024" in refusal.message()
        _check_answers(client.infer(MODEL, [_input(["y" * 1024], True)]), ["y" * 1024], sha256_hex, binary=True)


@pytest.fixture
def slow_url(start_daemon: Callable[..., str], start_http: Callable[..., str]) -> str:
    """batchd-http over a sim daemon whose every batch takes two seconds (its answer: the input
    reversed), far longer than the deadlines and reactions the tests below wait for."""
    return start_http(start_daemon("--backend", "sim", "--sim-fixed-us", "2000000", "--max-wait-ms", "1"))


def test_deadline_is_504(slow_url: str) -> None:
    with triton.InferenceServerClient(slow_url) as client:
        before = _stats(client)["inference_stats"]["fail"]["count"]
        started = time.monotonic()
        # Triton's request parameter, in microseconds.
        refusal = _refusal(lambda: client.infer(MODEL, [_input(["late"], True)], timeout=100_000))
        assert refusal.status() == "504", refusal.message()
        assert time.monotonic() - started < 1.5, "answered when the batch ended, not at the deadline"
        # batchd-http's own header, in milliseconds.
        refusal = _refusal(lambda: client.infer(MODEL, [_input(["late"], False)], headers={"X-Timeout-Ms": "100"}))
        assert refusal.status() == "504", refusal.message()
        assert _stats(client)["inference_stats"]["fail"]["count"] == before + 2
        # With time enough, the same backend answers.
        _check_answers(client.infer(MODEL, [_input(["late"], True)], timeout=10_000_000), ["late"], sim_answer,
                       binary=True)


def test_overloaded_is_503(start_daemon: Callable[..., str], start_http: Callable[..., str]) -> None:
    # Each of batchd-http's event loops is one daemon client with this many request slots, so a
    # tensor of more strings cannot be admitted whole, however idle the daemon: no race to win.
    address = start_http(start_daemon("--backend", "cpu", "--slots-per-client", "4"))
    with triton.InferenceServerClient(address) as client:
        refusal = _refusal(lambda: client.infer(MODEL, [_input(_strings(5), True)]))
        assert refusal.status() == "503" and "slots" in refusal.message()
        # The four it did admit were withdrawn, and their slots come back once the daemon has
        # let go of them (at once, unless it had them in a batch already): no slot is lost.
        deadline = time.monotonic() + 5
        while True:
            try:
                client.infer(MODEL, [_input(_strings(4), True)])
                break
            except InferenceServerException as e:
                assert e.status() == "503" and time.monotonic() < deadline, "a withdrawn string's slot is lost"
                time.sleep(0.01)
        for _ in range(3):
            _check_answers(client.infer(MODEL, [_input(_strings(4), True)]), _strings(4), sha256_hex, binary=True)
    status, body = _raw_post(address, f"/v2/models/{MODEL}/infer",
                             json.dumps({"inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [5],
                                                     "data": _strings(5)}]}).encode(),
                             {"Content-Type": "application/json"})
    assert status == 503 and set(body) == {"error"}


def test_a_client_that_leaves_has_its_strings_withdrawn(slow_url: str) -> None:
    body = json.dumps({"inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [8, 1],
                                   "data": [f"gone {i}" for i in range(8)]}]}).encode()
    host, port = slow_url.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as peer:
        # Closed with a reset, as a process that dies or gives up hard closes: a plain close sends
        # a FIN, which is also how a caller half-closes, and that one still gets its answer.
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: {slow_url}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 5
        while _metric(slow_url, "batchd_http_requests_in_flight") != 8:
            assert time.monotonic() < deadline, "the eight strings were never submitted"
            time.sleep(0.01)
    # Closed while its batch still runs: the front-end withdraws the strings instead of
    # waiting for them, so the inference fails (it is not answered and then dropped).
    deadline = time.monotonic() + 5
    while _metric(slow_url, "batchd_http_answers_dropped_total") != 1:
        assert time.monotonic() < deadline, "the departed client's answer was never dropped"
        time.sleep(0.01)
    assert _metric(slow_url, "batchd_http_requests_in_flight") == 0
    with triton.InferenceServerClient(slow_url) as client:
        stats = _stats(client)["inference_stats"]
        assert (stats["success"]["count"], stats["fail"]["count"]) == (0, 1)
        # The front-end goes on serving others.
        _check_answers(client.infer(MODEL, [_input(["still here"], True)]), ["still here"], sim_answer, binary=True)


def test_a_client_that_half_closes_still_gets_its_answer(url: str) -> None:
    body = json.dumps({"inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [2, 1],
                                   "data": ["half", "closed"]}]}).encode()
    host, port = url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as peer:
        peer.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: {url}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        peer.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := peer.recv(65536):
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert json.loads(payload)["outputs"][0]["data"] == [sha256_hex("half"), sha256_hex("closed")]


# --- perf_analyzer ------------------------------------------------------------------------------

def test_perf_analyzer_measures_without_errors(url: str) -> None:
    # Three windows is the fewest its stability check takes; short ones and -s 1000 (any three
    # windows) since this asserts correctness, not speed, on a shared machine (test_oip_grpc.py).
    report = run_perf_analyzer(["-m", MODEL, "-u", url, "-i", "http", "--concurrency-range", "16",
                                "--measurement-interval", "1500", "--max-trials", "3", "-s", "1000"])
    throughput = re.search(r"^Concurrency: 16, throughput: ([\d.]+) infer/sec", report, re.MULTILINE)
    assert throughput and float(throughput.group(1)) > 0, report
    # What it counted against what the server's statistics counted over the same windows: they
    # differ only by the requests in flight at the windows' edges.
    client_count = int(re.search(r"Client:\s+Request count: (\d+)", report).group(1))
    server_count = int(re.search(r"Server:\s+Inference count: (\d+)", report).group(1))
    assert client_count > 0 and abs(server_count - client_count) <= max(64, client_count // 50), report
    print(f"perf_analyzer: {throughput.group(1)} infer/sec")


def test_every_model_by_name_over_v1_and_v2(start_daemon: Callable[..., str],
                                             start_http: Callable[..., str]) -> None:
    daemon = start_daemon("--backend", "cpu", "--cpu-threads", "1",
                          "--model", "reversed:backend=sim,sim_devices=1,sim_fixed_us=100,version=4")
    address = start_http(daemon)
    headers = {"Content-Type": "application/json"}
    assert _raw_post(address, "/v1/models/reversed", b'{"input": "abc"}', headers) == (200, {"output": "cba"})
    assert _raw_post(address, "/v1/models/batchstring", b'{"input": "abc"}', headers) == \
        (200, {"output": sha256_hex("abc")})
    status, body = _raw_post(address, "/v1/models/nope", b'{"input": "abc"}', headers)
    assert status == 404 and body["error"]["code"] == "unknown_model", body
    assert "'batchstring', 'reversed'" in body["error"]["message"], body

    strings = _strings(9)
    with triton.InferenceServerClient(address) as client:
        assert client.is_model_ready("reversed") and client.is_model_ready("reversed", "4")
        assert client.get_model_metadata("reversed")["versions"] == ["4"]
        _check_answers(client.infer("reversed", [_input(strings, False)], outputs=_outputs(False)), strings,
                       sim_answer, False)
        _check_answers(client.infer(MODEL, [_input(strings, True)]), strings, sha256_hex, True)
        with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
            client.infer("nope", [_input(strings, False)])
        assert not client.is_model_ready("nope")
