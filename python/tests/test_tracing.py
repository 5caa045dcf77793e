"""OpenTelemetry traces (docs/TRACING.md), as a collector receives them: a small OTLP/HTTP receiver
decodes what batchd and batchd-http export with the protocol's own messages (opentelemetry-proto).
A request with a traceparent gets the caller's trace id on the front-end's and the daemon's spans,
each under the right parent, and a batch span linked to every request of its batch; the same from
the Python client over shared memory; a collector that is down costs no request; 1-in-N sampling;
Triton's trace extension changing rate, count and level at run time, globally and per model, from
tritonclient over HTTP and gRPC."""

from __future__ import annotations

import http.server
import json
import os
import secrets
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator

import batchd
import pytest
from conftest import sim_answer
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

# A batch of the sim backend takes 60 ms: requests sent together wait for the one before and are
# batched together.
SIM = ("--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "60000", "--sim-per-item-us", "0",
       "--policy", "fixed", "--max-wait-ms", "20")


@dataclass
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, object]
    links: list[tuple[str, str]] = field(default_factory=list)
    error: bool = False


def _value(any_value: object) -> object:
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(any_value, kind) if kind else None


class Collector:
    """An OTLP/HTTP traces receiver on a free port: every span it was sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                received = []
                for resource_spans in request.resource_spans:
                    attributes = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                    service = str(attributes.get("service.name", ""))
                    for scope in resource_spans.scope_spans:
                        for s in scope.spans:
                            received.append(Span(
                                service, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name, s.kind,
                                {a.key: _value(a.value) for a in s.attributes},
                                [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                                s.status.code == 2))
                with collector.lock:
                    collector.spans.extend(received)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, what: Callable[[list[Span]], bool], timeout: float = 15) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if what(spans):
                return spans
            assert time.monotonic() < deadline, f"the collector did not get what was expected: {len(spans)} spans"
            time.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def post(address: str, text: str, header: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if header is not None:
        headers["traceparent"] = header
    request = urllib.request.Request(f"http://{address}/v1/batchstring", data=json.dumps({"input": text}).encode(),
                                     headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.status, json.loads(answer.read())["output"]


def check_daemon_spans(spans: list[Span], trace_id: str, parent_id: str) -> Span:
    """The daemon's spans of one request: its own under `parent_id`, its wait and its run under it,
    the run linked to a batch span that links back. Returns the batch span."""
    mine = [s for s in spans if s.trace_id == trace_id and s.service == "batchd"]
    requests = [s for s in mine if s.name == "batchd request"]
    assert len(requests) == 1, mine
    request = requests[0]
    assert request.parent_id == parent_id
    assert request.attributes["triton.model_name"] == "batchstring"
    assert request.attributes["batchd.ran"] is True
    children = {s.name: s for s in mine if s.parent_id == request.span_id}
    assert set(children) == {"batchd queue", "batchd run"}, mine
    run = children["batchd run"]
    assert len(run.links) == 1
    batch = [s for s in spans if (s.trace_id, s.span_id) == run.links[0]]
    assert len(batch) == 1 and batch[0].name == "batchd batch"
    assert (trace_id, request.span_id) in batch[0].links
    return batch[0]


def batch_spans(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.name == "batchd batch"]


def test_a_traceparent_over_http_reaches_the_front_end_and_the_daemon(
        start_daemon: Callable[..., str], start_http: Callable[..., str], collector: Collector) -> None:
    trace_flags = ("--trace-endpoint", collector.endpoint, "--trace-rate", "0")
    socket = start_daemon(*SIM, *trace_flags)
    http = start_http(socket, "--workers", "1", *trace_flags)
    callers = [traceparent() for _ in range(8)]
    with ThreadPoolExecutor(len(callers) + 2) as pool:
        # Two requests without a context: answered, never traced (the rate is 0).
        answers = list(pool.map(lambda c: post(http, f"traced {c[1]}", c[0]), callers))
        untraced = list(pool.map(lambda i: post(http, f"untraced {i}", None), range(2)))
    assert answers == [(200, sim_answer(f"traced {c[1]}")) for c in callers]
    assert untraced == [(200, sim_answer(f"untraced {i}")) for i in range(2)]
    want = {c[1] for c in callers}

    def complete(spans: list[Span]) -> bool:
        front = {s.trace_id for s in spans if s.service == "batchd-http"}
        daemon = {s.trace_id for s in spans if s.name == "batchd run"}
        linked = sum(len(s.links) for s in batch_spans(spans))
        return want <= front and want <= daemon and linked == len(callers)

    spans = collector.wait_for(complete)
    assert {s.trace_id for s in spans if s.service == "batchd-http"} == want  # nothing untraced
    for header, trace_id, caller_span in callers:
        front = [s for s in spans if s.trace_id == trace_id and s.service == "batchd-http"]
        assert len(front) == 1, front
        server = front[0]
        assert server.parent_id == caller_span
        assert server.name == "POST /v1/batchstring"
        assert server.kind == 2  # SPAN_KIND_SERVER
        assert server.attributes["http.response.status_code"] == 200
        check_daemon_spans(spans, trace_id, server.span_id)
    # Each batch span links every traced request it served, and says how many it served: here all
    # were traced, so the two agree, and they add up to the requests sent.
    batches = batch_spans(spans)
    assert sum(int(b.attributes["batchd.batch.size"]) for b in batches) >= len(callers)
    traced_batches = [b for b in batches if b.links]
    assert sum(len(b.links) for b in traced_batches) == len(callers)
    for b in traced_batches:
        assert len(b.links) == b.attributes["batchd.batch.traced_requests"]
        assert len(b.links) <= int(b.attributes["batchd.batch.size"])
    assert any(len(b.links) > 1 for b in traced_batches), "the requests sent together were not batched together"


def test_a_traceparent_over_grpc_reaches_the_front_end_and_the_daemon(
        start_daemon: Callable[..., str], start_grpc: Callable[..., str], collector: Collector) -> None:
    if not os.environ.get("BATCHD_GRPC_BIN"):
        pytest.skip("this build has no batchd-grpc (meson -Dgrpc=disabled)")
    import numpy as np
    import tritonclient.grpc as triton

    trace_flags = ("--trace-endpoint", collector.endpoint, "--trace-rate", "0")
    socket = start_daemon(*SIM, *trace_flags)
    address = start_grpc(socket, *trace_flags)
    header, trace_id, caller_span = traceparent()
    texts = ["grpc one", "grpc two", "grpc three"]
    with triton.InferenceServerClient(address) as client:
        tensor = triton.InferInput("INPUT", [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=np.object_))
        result = client.infer("batchstring", [tensor], headers={"traceparent": header})
        assert [a.decode() for a in result.as_numpy("OUTPUT").reshape(-1)] == [sim_answer(t) for t in texts]
    spans = collector.wait_for(
        lambda spans: sum(s.trace_id == trace_id and s.name == "batchd run" for s in spans) == len(texts)
        and any(s.service == "batchd-grpc" for s in spans))
    front = [s for s in spans if s.trace_id == trace_id and s.service == "batchd-grpc"]
    assert len(front) == 1, front
    server = front[0]
    assert server.parent_id == caller_span
    assert server.name == "inference.GRPCInferenceService/ModelInfer"
    assert server.kind == 2
    assert server.attributes["rpc.grpc.status_code"] == 0
    # One inference of three strings: three requests in the daemon, each under the server span.
    requests = [s for s in spans if s.trace_id == trace_id and s.name == "batchd request"]
    assert len(requests) == len(texts)
    assert all(s.parent_id == server.span_id for s in requests)
    batches: set[str] = set()
    for request in requests:
        children = {s.name: s for s in spans if s.parent_id == request.span_id}
        assert set(children) == {"batchd queue", "batchd run"}
        link = children["batchd run"].links[0]
        batch = [s for s in spans if (s.trace_id, s.span_id) == link]
        assert len(batch) == 1 and (trace_id, request.span_id) in batch[0].links
        batches.add(batch[0].span_id)
    assert len(batches) == 1  # the three strings ran as one batch


def test_the_python_client_traces_over_shared_memory(start_daemon: Callable[..., str], collector: Collector) -> None:
    socket = start_daemon(*SIM, "--trace-endpoint", collector.endpoint, "--trace-rate", "0")
    header, trace_id, caller_span = traceparent()
    untraced_header = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00"
    with batchd.Client(socket) as client:
        assert client.submit("over shm", traceparent=header) == sim_answer("over shm")
        # An unsampled context is left to the daemon's sampler (rate 0: not traced).
        assert client.submit("not sampled", traceparent=untraced_header) == sim_answer("not sampled")
        with pytest.raises(ValueError, match="traceparent"):
            client.submit("bad", traceparent="00-nothex")
        many_header, many_trace, many_span = traceparent()
        texts = [f"many {i}" for i in range(5)]
        assert client.submit_many(texts, traceparent=many_header) == [sim_answer(t) for t in texts]
    spans = collector.wait_for(lambda spans: sum(s.name == "batchd request" for s in spans) == 6)
    check_daemon_spans(spans, trace_id, caller_span)
    many = [s for s in spans if s.trace_id == many_trace and s.name == "batchd request"]
    assert len(many) == 5 and all(s.parent_id == many_span for s in many)
    assert untraced_header.split("-")[1] not in {s.trace_id for s in spans}


def closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_collector_that_is_down_costs_no_request(start_daemon: Callable[..., str],
                                                   start_http: Callable[..., str]) -> None:
    # Every export fails: only spans are lost, and each process counts them.
    trace_flags = ("--trace-endpoint", f"http://127.0.0.1:{closed_port()}/v1/traces", "--trace-rate", "1")
    socket = start_daemon("--backend", "cpu", "--max-wait-ms", "1", *trace_flags)
    http = start_http(socket, "--workers", "1", *trace_flags)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: post(http, f"down {i}", traceparent()[0]), range(200)))
    assert [status for status, _ in answers] == [200] * 200
    with batchd.Client(socket) as client:
        texts = [f"shm {i}" for i in range(500)]
        assert len(client.submit_many(texts)) == len(texts)


@pytest.mark.parametrize("rate", [10, 50])
def test_one_in_n_sampling(start_daemon: Callable[..., str], collector: Collector, rate: int) -> None:
    socket = start_daemon("--backend", "cpu", "--max-wait-ms", "1", "--trace-endpoint", collector.endpoint,
                          "--trace-rate", str(rate))
    total = 10_000
    with batchd.Client(socket) as client:
        for start in range(0, total, 1000):
            texts = [f"sampled {i}" for i in range(start, start + 1000)]
            assert len(client.submit_many(texts, timeout=60)) == len(texts)
    want = total // rate
    spans = collector.wait_for(lambda spans: sum(s.name == "batchd request" for s in spans) >= want * 0.8)
    time.sleep(0.5)  # what is still queued
    with collector.lock:
        traced = sum(s.name == "batchd request" for s in collector.spans)
    assert want * 0.8 <= traced <= want * 1.2, (traced, want)
    assert all(s.parent_id == "" for s in spans if s.name == "batchd request")  # the daemon's own: roots


def front_spans(collector: Collector, service: str) -> list[Span]:
    with collector.lock:
        return [s for s in collector.spans if s.service == service]


def test_trace_settings_change_at_run_time_over_http(start_daemon: Callable[..., str],
                                                     start_http: Callable[..., str], collector: Collector) -> None:
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    trace_flags = ("--trace-endpoint", collector.endpoint, "--trace-rate", "0")
    socket = start_daemon("--backend", "cpu", "--max-wait-ms", "1", *trace_flags)
    http = start_http(socket, "--workers", "1", *trace_flags)
    with triton.InferenceServerClient(http) as client:
        assert "trace" in client.get_server_metadata()["extensions"]
        assert client.get_trace_settings() == {"trace_level": ["TIMESTAMPS"], "trace_rate": "0",
                                               "trace_count": "-1", "trace_mode": "opentelemetry"}
        for i in range(3):
            assert post(http, f"rate 0 {i}", None)[0] == 200  # not traced
        settings = client.update_trace_settings(settings={"trace_rate": "1", "trace_count": "4"})
        assert (settings["trace_rate"], settings["trace_count"]) == ("1", "4")
        for i in range(6):
            assert post(http, f"rate 1 {i}", None)[0] == 200  # the first 4 traced
        assert client.get_trace_settings()["trace_count"] == "0"
        client.update_trace_settings(settings={"trace_count": None})  # back to no limit
        # The model's own level: off for it, whatever its callers sample.
        own = client.update_trace_settings(model_name="batchstring", settings={"trace_level": ["OFF"]})
        assert own["trace_level"] == ["OFF"] and own["trace_rate"] == "1"
        assert client.get_trace_settings()["trace_level"] == ["TIMESTAMPS"]
        off = [traceparent() for _ in range(3)]
        for header, _, _ in off:
            assert post(http, "model off", header)[0] == 200
        # An update naming nothing drops the model's own: it follows the global settings again.
        assert client.update_trace_settings(model_name="batchstring", settings={})["trace_level"] == ["TIMESTAMPS"]
        on = [traceparent() for _ in range(2)]
        for header, _, _ in on:
            assert post(http, "model on", header)[0] == 200
        with pytest.raises(InferenceServerException, match="no trace file"):
            client.update_trace_settings(settings={"trace_file": "/tmp/trace.json"})
        with pytest.raises(InferenceServerException, match="unknown model"):
            client.get_trace_settings(model_name="no-such-model")
    want = {trace_id for _, trace_id, _ in on}
    collector.wait_for(lambda spans: want <= {s.trace_id for s in spans if s.service == "batchd-http"})
    time.sleep(0.5)  # anything else still on its way
    traced = front_spans(collector, "batchd-http")
    assert not {trace_id for _, trace_id, _ in off} & {s.trace_id for s in traced}
    assert len(traced) == 4 + len(on), [s.trace_id for s in traced]


def test_trace_settings_change_at_run_time_over_grpc(start_daemon: Callable[..., str],
                                                     start_grpc: Callable[..., str], collector: Collector) -> None:
    if not os.environ.get("BATCHD_GRPC_BIN"):
        pytest.skip("this build has no batchd-grpc (meson -Dgrpc=disabled)")
    import numpy as np
    import tritonclient.grpc as triton
    from tritonclient.utils import InferenceServerException

    trace_flags = ("--trace-endpoint", collector.endpoint, "--trace-rate", "0")
    socket = start_daemon("--backend", "cpu", "--max-wait-ms", "1", *trace_flags)
    address = start_grpc(socket, *trace_flags)

    def infer(client: triton.InferenceServerClient, text: str, header: str | None = None) -> None:
        tensor = triton.InferInput("INPUT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_))
        client.infer("batchstring", [tensor], headers={"traceparent": header} if header else None)

    def values(settings: dict) -> dict[str, list[str]]:
        return {k: v.get("value", []) for k, v in settings["settings"].items()}

    with triton.InferenceServerClient(address) as client:
        assert "trace" in client.get_server_metadata(as_json=True)["extensions"]
        assert values(client.get_trace_settings(as_json=True)) == {
            "trace_level": ["TIMESTAMPS"], "trace_rate": ["0"], "trace_count": ["-1"], "trace_mode": ["opentelemetry"]}
        infer(client, "rate 0")  # not traced
        own = client.update_trace_settings(model_name="batchstring", settings={"trace_rate": "1"}, as_json=True)
        assert values(own)["trace_rate"] == ["1"]
        assert values(client.get_trace_settings(as_json=True))["trace_rate"] == ["0"]  # the global one stays
        for i in range(3):
            infer(client, f"model rate 1 {i}")  # traced: the model's own rate
        client.update_trace_settings(model_name="batchstring", settings={"trace_level": ["OFF"]})
        off_header, off_trace, _ = traceparent()
        infer(client, "model off", off_header)
        # A setting named with no value clears it (tritonclient sends None so).
        cleared = client.update_trace_settings(model_name="batchstring",
                                               settings={"trace_level": None, "trace_rate": None}, as_json=True)
        assert values(cleared)["trace_rate"] == ["0"] and values(cleared)["trace_level"] == ["TIMESTAMPS"]
        on_header, on_trace, _ = traceparent()
        infer(client, "model on", on_header)
        with pytest.raises(InferenceServerException, match="TENSORS is not served"):
            client.update_trace_settings(settings={"trace_level": ["TENSORS"]})
        with pytest.raises(InferenceServerException, match="unknown model"):
            client.update_trace_settings(model_name="no-such-model", settings={"trace_rate": "1"})
    collector.wait_for(lambda spans: any(s.trace_id == on_trace and s.service == "batchd-grpc" for s in spans))
    time.sleep(0.5)
    traced = front_spans(collector, "batchd-grpc")
    assert off_trace not in {s.trace_id for s in traced}
    assert len(traced) == 3 + 1, [s.trace_id for s in traced]
