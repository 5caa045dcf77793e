#!/usr/bin/python3
"""The jobs queue on Redis Streams (issue 47, docs/JOBS.md): a burst of 10x one node's capacity for
JOBS_BURST_S seconds submitted through one node's front-end while 1, 2 and 3 nodes consume (sim
devices: the device ceiling, not the 2 cores, is the limit); every job's every output checked; the
backlog's drain rate against the consuming nodes' device ceiling, and how it scales with nodes. Then,
at low load, a one-input job's submit-to-result time against a synchronous request's on the same
node. Writes bench/results/jobs_queue.json. Environment: BATCHD_BENCH_BUILD (default build-release),
JOBS_BURST_S (10), JOBS_INPUTS (64 per job), JOBS_SUBMITTERS (4 threads), JOBS_LATENCY_N (300)."""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

BURST_S = float(os.environ.get("JOBS_BURST_S", "10"))
INPUTS = int(os.environ.get("JOBS_INPUTS", "64"))
SUBMITTERS = int(os.environ.get("JOBS_SUBMITTERS", "4"))
LATENCY_N = int(os.environ.get("JOBS_LATENCY_N", "300"))
# Each node: 2 sim devices, batches of 16 at 8 ms each: 4,000 inputs/s.
DEVICES, MAX_BATCH, FIXED_US = 2, 16, 8000
NODE_CEILING = DEVICES * MAX_BATCH / (FIXED_US / 1e6)
STREAM = "batchd:jobs:batchstring:normal"


class Redis:
    def __init__(self, work: Path):
        self.port = benchlib.free_port()
        self.proc = benchlib.Process(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(work), "--loglevel", "warning"], "redis")
        deadline = time.monotonic() + 10
        while self.cli("PING") != "PONG":
            if time.monotonic() > deadline:
                raise SystemExit("bench: redis-server did not start:\n" + self.proc.log_tail())
            time.sleep(0.05)

    def cli(self, *args) -> str:
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True).stdout.strip()

    def xlen(self, sock) -> int:
        """XLEN over a connection kept open (a redis-cli per look would cost the machine a core)."""
        sock.sendall(f"*2\r\n$4\r\nXLEN\r\n${len(STREAM)}\r\n{STREAM}\r\n".encode())
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += sock.recv(64)
        return int(reply[1:].strip())

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"


class Node:
    def __init__(self, work: Path, name: str, redis_url: str):
        (work / name).mkdir(exist_ok=True)
        self.daemon, sock = benchlib.start_daemon(
            work / name, "--backend", "sim", "--sim-repeat", "1", "--sim-devices", str(DEVICES), "--sim-fixed-us", str(FIXED_US),
            "--sim-per-item-us", "0", "--policy", "fixed", "--max-batch", str(MAX_BATCH), "--max-wait-ms", "2")
        self.port = benchlib.free_port()
        self.http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--socket", str(sock), "--listen",
                                      f"127.0.0.1:{self.port}", "--workers", "2", "--jobs-redis", redis_url,
                                      "--timeout-ms", "30000", "--log-level", "warn"], f"http-{name}")
        deadline = time.monotonic() + 10
        while True:
            try:
                if request(self.port, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: node {name} did not come up:\n{self.http.log_tail()}")
            time.sleep(0.05)

    def stop(self):
        self.http.stop()
        self.daemon.stop()


def request(port: int, method: str, path: str, body: str | None = None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    r = conn.getresponse()
    data = r.read()
    if own:
        conn.close()
    return r.status, data


def inputs_of(job: int) -> list[str]:
    return [f"burst job {job} input {k}" for k in range(INPUTS)]


def burst(node: Node, redis: Redis, rate_inputs: float, seconds: float) -> dict:
    """Submits jobs at rate_inputs/s for `seconds` through `node`; waits until the stream is empty."""
    jobs_per_s = rate_inputs / INPUTS
    total = int(jobs_per_s * seconds)
    ids = [None] * total
    refused = [0]
    next_job = [0]
    lock = threading.Lock()
    start = time.monotonic()

    def submitter():
        conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
        while True:
            with lock:
                job = next_job[0]
                next_job[0] += 1
            if job >= total:
                return
            due = start + job / jobs_per_s
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            status, data = request(node.port, "POST", "/v1/jobs", json.dumps({"inputs": inputs_of(job)}), conn)
            if status == 202:
                ids[job] = json.loads(data)["id"]
            else:
                refused[0] += 1

    threads = [threading.Thread(target=submitter) for _ in range(SUBMITTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    submitted_s = time.monotonic() - start
    with socket.create_connection(("127.0.0.1", redis.port)) as sock:
        while redis.xlen(sock) > 0:
            time.sleep(0.02)
    drained_s = time.monotonic() - start
    # Every job's every output, through the submitting node.
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    right = wrong = missing = 0
    for job, job_id in enumerate(ids):
        if job_id is None:
            missing += 1
            continue
        status, data = request(node.port, "GET", f"/v1/jobs/{job_id}", conn=conn)
        answer = json.loads(data)
        if status == 200 and answer.get("status") == "done" and \
                answer.get("outputs") == [s[::-1] for s in inputs_of(job)]:
            right += 1
        else:
            wrong += 1
    inputs = (total - refused[0]) * INPUTS
    return {"jobs": total, "inputs_per_job": INPUTS, "offered_inputs_per_s": rate_inputs,
            "submitted_in_s": round(submitted_s, 2), "drained_in_s": round(drained_s, 2),
            "drain_inputs_per_s": round(inputs / drained_s), "refused": refused[0], "right": right, "wrong": wrong,
            "not_accepted": missing}


def latency(node: Node) -> dict:
    """Submit-to-result of one-input jobs, polled every 0.2 ms, against synchronous requests."""
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    job_ms, sync_ms = [], []
    for i in range(LATENCY_N):
        t0 = time.perf_counter()
        status, data = request(node.port, "POST", "/v1/batchstring", json.dumps({"input": f"sync {i}"}), conn)
        sync_ms.append((time.perf_counter() - t0) * 1e3)
        assert status == 200 and json.loads(data)["output"] == f"sync {i}"[::-1]
        t0 = time.perf_counter()
        status, data = request(node.port, "POST", "/v1/jobs", json.dumps({"input": f"job {i}"}), conn)
        assert status == 202, data
        job_id = json.loads(data)["id"]
        while True:
            status, data = request(node.port, "GET", f"/v1/jobs/{job_id}", conn=conn)
            answer = json.loads(data)
            if answer["status"] != "pending":
                break
            time.sleep(0.0002)
        job_ms.append((time.perf_counter() - t0) * 1e3)
        assert answer["status"] == "done" and answer["output"] == f"job {i}"[::-1], answer
        time.sleep(0.01)
    job_ms.sort()
    sync_ms.sort()
    p50 = lambda xs: xs[len(xs) // 2]  # noqa: E731
    return {"n": LATENCY_N, "job_p50_ms": round(p50(job_ms), 2), "sync_p50_ms": round(p50(sync_ms), 2),
            "job_p99_ms": round(job_ms[int(len(job_ms) * 0.99)], 2), "sync_p99_ms": round(sync_ms[int(len(sync_ms) * 0.99)], 2)}


def main():
    results = {"node_ceiling_inputs_per_s": NODE_CEILING, "burst_s": BURST_S, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for consumers in (1, 2, 3):
            redis = Redis(work)
            nodes = []
            try:
                for n in range(consumers):
                    nodes.append(Node(work, f"node{consumers}-{n}", redis.url))
                run = burst(nodes[0], redis, 10 * NODE_CEILING, BURST_S)
                run["consuming_nodes"] = consumers
                run["ceiling_inputs_per_s"] = consumers * NODE_CEILING
                run["of_ceiling"] = round(run["drain_inputs_per_s"] / run["ceiling_inputs_per_s"], 3)
                results["runs"].append(run)
                print(f"jobs queue, {consumers} consuming node(s): {run['jobs']} jobs of {INPUTS} inputs offered at "
                      f"{10 * NODE_CEILING:.0f} inputs/s for {BURST_S:.0f} s; {run['refused']} refused; drained in "
                      f"{run['drained_in_s']} s at {run['drain_inputs_per_s']} inputs/s = {run['of_ceiling']:.0%} of "
                      f"the ceiling; {run['right']} right, {run['wrong']} wrong", flush=True)
                if consumers == 1:
                    results["latency"] = latency(nodes[0])
                    lat = results["latency"]
                    print(f"jobs queue, low load: one-input job p50 {lat['job_p50_ms']} ms, synchronous "
                          f"p50 {lat['sync_p50_ms']} ms (p99 {lat['job_p99_ms']} / {lat['sync_p99_ms']} ms)", flush=True)
            finally:
                for node in nodes:
                    node.stop()
                redis.proc.stop()
    rate = {r["consuming_nodes"]: r["drain_inputs_per_s"] for r in results["runs"]}
    results["scaling_2"] = round(rate[2] / rate[1], 2)
    results["scaling_3"] = round(rate[3] / rate[1], 2)
    print(f"jobs queue: 2 nodes drain {results['scaling_2']}x one node's rate, 3 nodes {results['scaling_3']}x")
    benchlib.write_result("jobs_queue.json", results)


if __name__ == "__main__":
    main()
