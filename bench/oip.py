#!/usr/bin/env python3
"""docs/BENCHMARKS.md section 4d: the Open Inference Protocol, driven by Triton's own load tool.

One daemon (sim backend, 2 devices, 2 ms + 20 µs per item, the default policy), batchd-http and
batchd-grpc in front of it, all in one run:
  1. perf_analyzer (tritonclient 2.41's, from .venv) at concurrency 1, 16, 64, 256 over HTTP, gRPC
     and gRPC streaming: throughput and p99, errors;
  2. the ratios the issue sets: gRPC streaming at concurrency 64 against batchd-http /v1 under wrk
     at 64 connections, and /v2 HTTP JSON under wrk at 64 connections against /v1 (each on the same
     daemon, in the same run);
  3. a 10,000/s open loop over gRPC for 60 s (batchd-stress --protocol grpc): p99, errors, wrong.
Writes bench/results/oip.json. Environment: OIP_WINDOW_MS (perf_analyzer's window, 3000), OIP_POINT_TIMEOUT_S (240),
OIP_WRK_S (10), OIP_OPEN_S (60).
"""

import csv
import glob
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import benchlib

SIM = ["--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "2000", "--sim-per-item-us", "20"]
CONCURRENCY = [1, 16, 64, 256]
MODES = {  # name: perf_analyzer flags
    "http": ["-i", "http"],
    "grpc": ["-i", "grpc", "--async"],
    "grpc_stream": ["-i", "grpc", "--streaming"],
}
WINDOW_MS = int(os.environ.get("OIP_WINDOW_MS", "3000"))
POINT_TIMEOUT_S = int(os.environ.get("OIP_POINT_TIMEOUT_S", "240"))
WRK_S = float(os.environ.get("OIP_WRK_S", "10"))
OPEN_S = float(os.environ.get("OIP_OPEN_S", "60"))
VENV = benchlib.ROOT / ".venv"

WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '%s'
function done(summary, latency, requests)
  io.write(string.format('WRKJSON {"requests":%%d,"duration_us":%%d,"non_2xx":%%d,"errors":%%d,'
    .. '"p50_us":%%.1f,"p99_us":%%.1f}\\n', summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""
V1_BODY = '{"input":"a request of some forty bytes, give or take"}'
V2_BODY = ('{"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"BYTES",'
           '"data":["a request of some forty bytes, give or take"]}]}')


def perf_analyzer_env() -> dict:
    libs = glob.glob(str(VENV / "lib" / "python3*" / "site-packages" / "nvidia" / "cuda_runtime" / "lib"))
    if not (VENV / "bin" / "perf_analyzer").exists() or not libs:
        raise SystemExit("bench: .venv has no perf_analyzer or CUDA runtime: run scripts/setup_venv.sh")
    return {**os.environ, "LD_LIBRARY_PATH": libs[0]}


def perf_analyzer(url: str, mode: str, concurrency: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "pa.csv"
        args = [str(VENV / "bin" / "perf_analyzer"), "-m", "batchstring", "-u", url, *MODES[mode],
                "--concurrency-range", str(concurrency), "--measurement-interval", str(WINDOW_MS),
                "--max-trials", "3", "-s", "50", "-f", str(report)]
        try:
            done = subprocess.run(args, capture_output=True, text=True, env=perf_analyzer_env(), timeout=POINT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # perf_analyzer's synchronous HTTP mode runs a thread per request in flight: 256 of
            # them on 2 cores may not get through its windows in time. Said in the table as such.
            print(f"oip: {mode:12s} c={concurrency:3d}: perf_analyzer did not finish in {POINT_TIMEOUT_S} s")
            return {"mode": mode, "concurrency": concurrency, "exit": "timeout", "error_lines": 0, "first_error": ""}
        out = done.stdout + done.stderr
        errors = [line for line in out.splitlines() if "error" in line.lower()]
        row = {"mode": mode, "concurrency": concurrency, "exit": done.returncode, "error_lines": len(errors),
               "first_error": errors[0] if errors else ""}
        if report.exists():
            rows = list(csv.DictReader(io.StringIO(report.read_text())))
            if rows:
                row["infer_per_s"] = float(rows[0]["Inferences/Second"])
                row["p50_us"] = float(rows[0]["p50 latency"])
                row["p99_us"] = float(rows[0]["p99 latency"])
        print(f"oip: {mode:12s} c={concurrency:3d}: {row.get('infer_per_s', 0):9.0f}/s "
              f"p99 {row.get('p99_us', 0) / 1000:7.2f} ms exit {done.returncode} errors {len(errors)}")
        return row


def wrk(url: str, body: str, connections: int, work: Path) -> dict:
    script = work / f"post-{abs(hash(body))}.lua"
    script.write_text(WRK_LUA % body)
    done = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{WRK_S:g}s", "--timeout", "5s", "-s", str(script), url],
                          capture_output=True, text=True, timeout=WRK_S + 60)
    for line in done.stdout.splitlines():
        if line.startswith("WRKJSON "):
            out = json.loads(line[len("WRKJSON "):])
            out["rps"] = out["requests"] / (out["duration_us"] / 1e6)
            print(f"oip: wrk {url} c={connections}: {out['rps']:.0f}/s p99 {out['p99_us'] / 1000:.2f} ms "
                  f"non-2xx {out['non_2xx']} errors {out['errors']}")
            return out
    raise SystemExit(f"bench: wrk printed no summary:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def wait_ready(url: str, what: str, proc: benchlib.Process):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if not proc.alive():
            break
        time.sleep(0.1)
    raise SystemExit(f"bench: {what} did not become ready; its log:\n{proc.log_tail()}")


def open_loop_grpc(grpc_port: int) -> dict:
    args = [benchlib.binary("tools/batchd-stress"), "--protocol", "grpc", "--grpc", f"127.0.0.1:{grpc_port}",
            "--json", "--quiet", "--rate", "10000", "--duration", str(OPEN_S), "--warmup", "1",
            "--cooldown", "0.5", "--input-bytes", "16:256", "--expect-sim", "1"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=OPEN_S + 120)
    run = benchlib.last_json_line(done.stdout + "\n" + done.stderr, "batchd-stress --protocol grpc")
    run["held"] = benchlib.held(run)
    print(f"oip: gRPC open loop 10,000/s for {OPEN_S:g} s: p99 {run['p99_us'] / 1000:.2f} ms, "
          f"errors {run['errors']}, wrong {run['wrong']}")
    return run


def main():
    with tempfile.TemporaryDirectory(prefix="bench-oip-") as tmp:
        work = Path(tmp)
        daemon, sock = benchlib.start_daemon(work, *SIM)
        http_port, grpc_port = benchlib.free_port(), benchlib.free_port()
        http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{http_port}",
                                 "--socket", str(sock), "--log-level", "warn"], "batchd-http")
        grpc = benchlib.Process([benchlib.binary("grpc_frontend/batchd-grpc"), "--listen", f"127.0.0.1:{grpc_port}",
                                 "--socket", str(sock), "--log-level", "warn"], "batchd-grpc")
        try:
            wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", "batchd-http", http)
            time.sleep(0.5)  # batchd-grpc attaches as quickly; perf_analyzer's first call checks it
            urls = {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}",
                    "grpc_stream": f"127.0.0.1:{grpc_port}"}
            # gRPC first, then wrk and the open loop, then HTTP: perf_analyzer's synchronous HTTP
            # mode at 256 (a thread per request in flight) loads these 2 cores most.
            matrix = [perf_analyzer(urls[mode], mode, c) for mode in ("grpc", "grpc_stream") for c in CONCURRENCY]
            v1 = wrk(f"http://127.0.0.1:{http_port}/v1/batchstring", V1_BODY, 64, work)
            v2 = wrk(f"http://127.0.0.1:{http_port}/v2/models/batchstring/infer", V2_BODY, 64, work)
            stream64 = next(r for r in matrix if r["mode"] == "grpc_stream" and r["concurrency"] == 64)
            ratios = {"grpc_stream_64_over_v1": stream64.get("infer_per_s", 0) / v1["rps"],
                      "v2_json_over_v1": v2["rps"] / v1["rps"]}
            print(f"oip: gRPC streaming c64 / v1: {ratios['grpc_stream_64_over_v1']:.2f} (bar 0.6); "
                  f"/v2 JSON / v1: {ratios['v2_json_over_v1']:.2f} (bar 0.8)")
            open_loop = open_loop_grpc(grpc_port)
            matrix = [perf_analyzer(urls["http"], "http", c) for c in CONCURRENCY] + matrix
        finally:
            for proc in (grpc, http, daemon):
                proc.stop()
    benchlib.write_result("oip.json", {"sim": SIM, "window_ms": WINDOW_MS, "wrk_s": WRK_S, "open_s": OPEN_S,
                                       "matrix": matrix,
                                       "wrk": {"v1": v1, "v2_json": v2}, "ratios": ratios, "open_loop": open_loop})


if __name__ == "__main__":
    sys.exit(main())
