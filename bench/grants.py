#!/usr/bin/python3
"""Priority over the network is the operator's grant (issue 33's must-show). One daemon (cpu
backend, default flags), batchd-http (2 workers) and batchd-grpc with a token file. A light client
sends 200 requests/s (open loop, every answer checked) alone, then beside a remote flood of 60 KB
inputs (closed loop, FLOOD_THREADS callers) marked normal, then the same flood marked high without
a grant: the light client's p99 beside the high flood should be within 1.5x of its p99 beside the
normal one, 0 errors, and every flood request counted as a downgrade. The same over gRPC (the
flood from tritonclient's stub with Triton's priority parameter 1). Last, beside the HTTP flood
marked high on a daemon whose backend is the bottleneck (a simulated device, batches of 8), two Python
callers at 100/s each, one with a token granting high and claiming it, one plain: the granted one's
p99 should be below the other's. Writes bench/results/grants.json.
Usage: grants.py   Environment: GRANTS_S (seconds per light run, default 5), FLOOD_THREADS (16),
GRANTED_FLOOD_THREADS (64)."""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

RUN_S = float(os.environ.get("GRANTS_S", "5"))
FLOOD_THREADS = int(os.environ.get("FLOOD_THREADS", "16"))
# The granted caller's step: a deeper flood (the 64 keep-alive callers), so that the
# daemon's queue, which the granted class skips, is what a normal caller waits on.
GRANTED_FLOOD_THREADS = int(os.environ.get("GRANTED_FLOOD_THREADS", "64"))
TOKEN = "bench-ops-token-7f3a9c1e5b2d4680"
VENV_PYTHON = benchlib.ROOT / ".venv" / "bin" / "python3"
# The gRPC flood: tritonclient's generated stub, THREADS callers for SECONDS, each string claiming
# Triton's priority 1; prints how many calls succeeded and failed.
GRPC_FLOOD = r"""
import sys, threading, time, grpc
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc as rpc
target, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
stub = rpc.GRPCInferenceServiceStub(grpc.insecure_channel(target))
ok, failed, end = [0], [0], time.monotonic() + seconds
def run(t):
    i = 0
    while time.monotonic() < end:
        r = pb.ModelInferRequest(model_name="batchstring")
        x = r.inputs.add(); x.name = "INPUT"; x.datatype = "BYTES"; x.shape.append(1)
        x.contents.bytes_contents.append(f"{t}:{i}:".encode() + b"f" * 60000)
        r.parameters["priority"].uint64_param = int(sys.argv[4])
        try:
            stub.ModelInfer(r, timeout=20); ok[0] += 1
        except grpc.RpcError:
            failed[0] += 1
        i += 1
ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
print(f"{ok[0]} {failed[0]}")
"""


def light(transport: list[str]) -> dict:
    args = [benchlib.binary("tools/batchd-stress"), *transport, "--rate", "200", "--duration", str(RUN_S),
            "--timeout-ms", "10000", "--json", "--quiet"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=RUN_S + 120)
    s = benchlib.last_json_line(done.stdout + "\n" + done.stderr, "light client")
    return {k: s[k] for k in ("sent", "ok", "errors", "wrong", "p50_us", "p99_us", "max_us")}


def http_flood(url: str, priority: str, threads: int = FLOOD_THREADS, *inputs) -> subprocess.Popen:
    args = [benchlib.binary("tools/batchd-stress"), "--http", url, "--threads", str(threads),
            "--duration", str(RUN_S + 2), *(inputs or ("--input-bytes", "60000:60000")), "--priority", priority,
            "--timeout-ms", "10000", "--json", "--quiet"]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def grpc_flood(target: str, level: int) -> subprocess.Popen:
    return subprocess.Popen([str(VENV_PYTHON), "-c", GRPC_FLOOD, target, str(FLOOD_THREADS), str(RUN_S + 2),
                             str(level)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def metric(url: str, series: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    raise SystemExit(f"bench: {series} is not in {url}/metrics")


def paced_caller(port: int, headers: dict, seconds: float, out: list):
    """100 requests/s on one keep-alive connection; each latency in µs, or None for an error."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    start = time.monotonic()
    for i in range(int(seconds * 100)):
        time.sleep(max(0.0, start + i / 100 - time.monotonic()))
        t0 = time.perf_counter()
        conn.request("POST", "/v1/batchstring", body=json.dumps({"input": f"paced {i}"}), headers=headers)
        r = conn.getresponse()
        r.read()
        out.append((time.perf_counter() - t0) * 1e6 if r.status == 200 else None)


def p99(samples: list) -> float:
    ok = sorted(s for s in samples if s is not None)
    return ok[min(len(ok) - 1, int(len(ok) * 0.99))] if ok else float("nan")


def beside(flood: subprocess.Popen, measure) -> dict:
    time.sleep(1)
    result = measure()
    out, _ = flood.communicate(timeout=RUN_S + 120)
    result["flood"] = out.strip().splitlines()[-1] if out.strip() else ""
    return result


def run_protocol(name: str, light_transport: list[str], start_flood, downgrades) -> dict:
    out = {"alone": light(light_transport)}
    for marked in ("normal", "high"):
        before = downgrades()
        out[f"beside_{marked}"] = beside(start_flood(marked), lambda: light(light_transport))
        out[f"beside_{marked}"]["downgrades"] = downgrades() - before
    ratio = out["beside_high"]["p99_us"] / out["beside_normal"]["p99_us"]
    out["p99_ratio_high_vs_normal"] = ratio
    print(f"grants: {name}: light p99 alone {out['alone']['p99_us'] / 1000:.2f} ms, beside the flood marked normal "
          f"{out['beside_normal']['p99_us'] / 1000:.2f} ms, marked high {out['beside_high']['p99_us'] / 1000:.2f} ms "
          f"(ratio {ratio:.2f}, bar 1.5); errors {out['beside_high']['errors']}; "
          f"downgrades {out['beside_high']['downgrades']:.0f}")
    return out


def granted_vs_normal(work: Path, tokens: Path) -> dict:
    """Its own daemon, where the backend is the bottleneck and a queue forms in the daemon (what
    a class skips): one simulated device, 2 ms + 100 us a request, batches of at most 8; the HTTP
    flood of small inputs (GRANTED_FLOOD_THREADS callers, marked high, downgraded) keeps some 64
    requests waiting, 8 batches deep."""
    daemon, sock = benchlib.start_daemon(work, "--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "2000",
                                         "--sim-per-item-us", "100", "--max-batch", "8")
    port = benchlib.free_port()
    with daemon, benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}",
                                   "--socket", str(sock), "--log-level", "warn", "--priority-tokens", str(tokens)],
                                  "batchd-http (granted step)"):
        time.sleep(1.5)
        return granted_beside_flood(f"http://127.0.0.1:{port}", port)


def granted_beside_flood(http_url: str, port: int) -> dict:
    granted, plain = [], []
    callers = [threading.Thread(target=paced_caller, args=(port, {"Authorization": f"Bearer {TOKEN}",
                                                                  "X-Priority": "high"}, RUN_S, granted)),
               threading.Thread(target=paced_caller, args=(port, {}, RUN_S, plain))]

    def measure():
        [c.start() for c in callers]
        [c.join() for c in callers]
        return {"granted_p99_us": p99(granted), "normal_p99_us": p99(plain),
                "granted_errors": granted.count(None), "normal_errors": plain.count(None)}
    out = beside(http_flood(http_url, "high", GRANTED_FLOOD_THREADS, "--input-bytes", "64:64", "--expect-sim", "1"),
                 measure)
    print(f"grants: beside an HTTP flood marked high: token-granted caller p99 {out['granted_p99_us'] / 1000:.2f} ms, "
          f"normal caller p99 {out['normal_p99_us'] / 1000:.2f} ms")
    return out


def main():
    results = {"run_s": RUN_S, "flood_threads": FLOOD_THREADS, "granted_flood_threads": GRANTED_FLOOD_THREADS,
               "build": benchlib.build_dir().name}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokens = work / "tokens.toml"
        tokens.write_text(f'[[token]]\nname = "bench"\ntoken = "{TOKEN}"\nmax_priority = "high"\n')
        tokens.chmod(0o600)
        daemon, sock = benchlib.start_daemon(work, "--backend", "cpu")
        http_port, grpc_port, grpc_metrics = benchlib.free_port(), benchlib.free_port(), benchlib.free_port()
        grant = ["--socket", str(sock), "--log-level", "warn", "--priority-tokens", str(tokens)]
        with daemon, \
                benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{http_port}",
                                  "--workers", "2", *grant], "batchd-http"), \
                benchlib.Process([benchlib.binary("grpc_frontend/batchd-grpc"), "--listen", f"127.0.0.1:{grpc_port}",
                                  "--metrics-listen", f"127.0.0.1:{grpc_metrics}", *grant], "batchd-grpc"):
            http_url = f"http://127.0.0.1:{http_port}"
            time.sleep(1.5)
            series = 'priority_downgrades_total{claimed="high",granted="normal"}'
            results["http"] = run_protocol(
                "HTTP", ["--http", http_url], lambda p: http_flood(http_url, p),
                lambda: metric(http_url, "batchd_http_" + series))
            results["grpc"] = run_protocol(
                "gRPC", ["--protocol", "grpc", "--grpc", f"127.0.0.1:{grpc_port}"],
                lambda p: grpc_flood(f"127.0.0.1:{grpc_port}", 1 if p == "high" else 0),
                lambda: metric(f"http://127.0.0.1:{grpc_metrics}", "batchd_grpc_" + series))
        results["granted"] = granted_vs_normal(work, tokens)
    benchlib.write_result("grants.json", results)


if __name__ == "__main__":
    main()
