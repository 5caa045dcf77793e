#!/usr/bin/env python3
"""Scale-out through HAProxy with the shipped deploy/haproxy/batchd.cfg (ports swapped for free
ones), on the sim backend so that the devices, not this 2-core machine, are the bottleneck:

1. nodes: closed-loop throughput through HAProxy with 1, 2 and 3 nodes (each one sim device of
   10 ms + 1 ms per request, batches of at most 16: 16 / 26 ms = 615 requests/s per node), with
   enough callers to keep every node's device busy; it should grow nearly linearly;
2. overhead: the same open-loop load (a node with room to spare) straight to a node's batchd-http
   and through HAProxy, in the same run: the latency the balancer adds;
3. kill: 5,000 requests/s through HAProxy to 3 nodes for 15 s, one node's batchd-http and batchd
   killed with SIGKILL at 5 s and restarted at 10 s: sent, ok, failed, wrong, and the worst
   per-second p99 before, during and after (batchd-stress --csv).

Writes bench/results/scale-out.json. Needs haproxy (scripts/setup.sh installs it) and a release
build (BATCHD_BENCH_BUILD, default build-release)."""

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

CONFIG = benchlib.ROOT / "deploy" / "haproxy" / "batchd.cfg"
NODE_COST = {"fixed_us": 10000, "per_item_us": 1000, "max_batch": 16}
NODE_CAPACITY = NODE_COST["max_batch"] / ((NODE_COST["fixed_us"] + NODE_COST["per_item_us"] * NODE_COST["max_batch"]) / 1e6)
CALLERS_PER_NODE = 48  # three full batches' worth per node: its device never waits for callers
SECONDS = 8
OVERHEAD_RATE = 2000


def wait_port(port: int, proc: benchlib.Process, what: str):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if not proc.alive():
            break
        time.sleep(0.05)
    raise SystemExit(f"bench: {what} did not listen; its log:\n{proc.log_tail()}")


class Node:
    """A batchd daemon and its batchd-http on a fixed port."""

    def __init__(self, work: Path, name: str, daemon_flags: list):
        self.dir = work / name
        self.dir.mkdir()
        self.port = benchlib.free_port()
        self.daemon, sock = benchlib.start_daemon(self.dir, *daemon_flags)
        self.http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{self.port}",
                                      "--socket", str(sock), "--workers", "1", "--log-level", "warn"], f"http-{name}")
        wait_port(self.port, self.http, f"batchd-http of {name}")

    def stop(self):
        self.http.stop()
        self.daemon.stop()

    def kill(self):
        for proc in (self.http, self.daemon):
            proc.proc.kill()
            proc.proc.wait()

    def restart(self, daemon_flags: list):
        self.daemon, sock = benchlib.start_daemon(self.dir, *daemon_flags)
        self.http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{self.port}",
                                      "--socket", str(sock), "--workers", "1", "--log-level", "warn"], "http-again")
        wait_port(self.port, self.http, "restarted batchd-http")


class Haproxy:
    def __init__(self, work: Path, node_ports: list):
        self.port = benchlib.free_port()
        text = CONFIG.read_text().replace("bind 127.0.0.1:8090", f"bind 127.0.0.1:{self.port}")
        for i in range(3):
            line = f"    server node{i + 1} 127.0.0.1:808{i + 1}\n"
            if line not in text:
                raise SystemExit(f"bench: {CONFIG} no longer has {line.strip()!r}")
            # Nodes not in this run are left out, not marked down: a down server still costs checks.
            text = text.replace(line, f"    server node{i + 1} 127.0.0.1:{node_ports[i]}\n" if i < len(node_ports) else "")
        path = work / "haproxy.cfg"
        path.write_text(text)
        self.proc = benchlib.Process([shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(path)], "haproxy")
        wait_port(self.port, self.proc, "haproxy")

    def stop(self):
        self.proc.stop()


def http_stress(port: int, *flags) -> dict:
    args = [benchlib.binary("tools/batchd-stress"), "--http", f"http://127.0.0.1:{port}", "--json", "--quiet",
            "--expect-sim", "1", "--input-bytes", "16:64", *flags]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    out = benchlib.last_json_line(done.stdout + "\n" + done.stderr, "batchd-stress " + " ".join(flags))
    return {k: out[k] for k in ("sent", "ok", "errors", "wrong", "rps", "p50_us", "p99_us")}


def node_scaling(work: Path) -> list:
    rows = []
    flags = ["--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", str(NODE_COST["fixed_us"]),
             "--sim-per-item-us", str(NODE_COST["per_item_us"]), "--max-batch", str(NODE_COST["max_batch"])]
    for count in (1, 2, 3):
        nodes = [Node(work, f"n{count}-{i}", flags) for i in range(count)]
        proxy = Haproxy(work, [n.port for n in nodes])
        try:
            time.sleep(1.5)  # every server's first checks have passed (rise 2 x 500 ms)
            callers = CALLERS_PER_NODE * count
            m = http_stress(proxy.port, "--threads", str(callers), "--duration", str(SECONDS))
            m.update(nodes=count, callers=callers, ceiling_rps=NODE_CAPACITY * count)
            rows.append(m)
            print(f"scale-out: {count} node(s), {callers} callers: {m['rps']:.0f} req/s "
                  f"({m['rps'] / (NODE_CAPACITY * count):.0%} of {NODE_CAPACITY * count:.0f}), "
                  f"p99 {m['p99_us'] / 1e3:.1f} ms, errors {m['errors']}")
        finally:
            proxy.stop()
            for n in nodes:
                n.stop()
    return rows


def overhead(work: Path) -> dict:
    """One node with room to spare (2 sim devices of 2 ms + 20 us), the same open-loop rate
    straight to it and through HAProxy, alternated twice so drift shows."""
    node = Node(work, "overhead", ["--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "2000",
                                   "--sim-per-item-us", "20"])
    proxy = Haproxy(work, [node.port])
    runs = {"direct": [], "haproxy": []}
    try:
        time.sleep(1.5)
        for _ in range(2):
            for name, port in (("direct", node.port), ("haproxy", proxy.port)):
                runs[name].append(http_stress(port, "--rate", str(OVERHEAD_RATE), "--duration", str(SECONDS),
                                              "--connections", "64", "--pipeline-depth", "1"))
    finally:
        proxy.stop()
        node.stop()
    out = {"rate": OVERHEAD_RATE, "runs": runs}
    for name in runs:
        out[name] = {k: sum(r[k] for r in runs[name]) / len(runs[name]) for k in ("p50_us", "p99_us", "rps")}
    out["added_p50_us"] = out["haproxy"]["p50_us"] - out["direct"]["p50_us"]
    out["added_p99_us"] = out["haproxy"]["p99_us"] - out["direct"]["p99_us"]
    print(f"scale-out: {OVERHEAD_RATE} req/s direct p50 {out['direct']['p50_us'] / 1e3:.2f} ms p99 "
          f"{out['direct']['p99_us'] / 1e3:.2f} ms; through HAProxy p50 {out['haproxy']['p50_us'] / 1e3:.2f} ms "
          f"p99 {out['haproxy']['p99_us'] / 1e3:.2f} ms")
    return out


def node_kill(work: Path) -> dict:
    flags = ["--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "2000", "--sim-per-item-us", "20"]
    nodes = [Node(work, f"kill-{i}", flags) for i in range(3)]
    proxy = Haproxy(work, [n.port for n in nodes])
    csv = work / "kill.csv"
    try:
        time.sleep(1.5)
        args = [benchlib.binary("tools/batchd-stress"), "--http", f"http://127.0.0.1:{proxy.port}", "--json", "--quiet",
                "--expect-sim", "1", "--input-bytes", "16:64", "--rate", "5000", "--duration", "15",
                "--connections", "128", "--pipeline-depth", "1", "--csv", str(csv)]
        start = time.monotonic()
        load = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(max(0.0, start + 5 - time.monotonic()))
        nodes[1].kill()
        time.sleep(max(0.0, start + 10 - time.monotonic()))
        nodes[1].restart(flags)
        out, _ = load.communicate(timeout=120)
        summary = benchlib.last_json_line(out, "batchd-stress (node kill)")
    finally:
        proxy.stop()
        for n in nodes:
            n.stop()
    rows = [line.split(",") for line in csv.read_text().splitlines()[1:]]
    seconds = [{"t": float(r[0]), "sent": int(r[1]), "ok": int(r[2]), "errors": int(r[3]), "p99_us": int(r[6])} for r in rows]
    phase = lambda lo, hi: max((x["p99_us"] for x in seconds if lo < x["t"] <= hi), default=0)
    result = {k: summary[k] for k in ("sent", "ok", "errors", "wrong", "p50_us", "p99_us")}
    result.update(per_second=seconds, worst_p99_us={"before": phase(0, 5), "during": phase(5, 10), "after": phase(10, 99)})
    print(f"scale-out: node kill: sent {result['sent']}, ok {result['ok']}, failed {result['errors']}, wrong "
          f"{result['wrong']}; worst per-second p99 before {result['worst_p99_us']['before'] / 1e3:.1f} ms, during "
          f"{result['worst_p99_us']['during'] / 1e3:.1f} ms, after {result['worst_p99_us']['after'] / 1e3:.1f} ms")
    return result


def main():
    parts = sys.argv[1:] or ["nodes", "overhead", "kill"]
    with tempfile.TemporaryDirectory(prefix="batchd-scale-") as tmp:
        work = Path(tmp)
        result = {"node_cost": NODE_COST, "node_capacity_rps": NODE_CAPACITY, "seconds": SECONDS}
        if "nodes" in parts:
            result["nodes"] = node_scaling(work)
        if "overhead" in parts:
            result["overhead"] = overhead(work)
        if "kill" in parts:
            result["kill"] = node_kill(work)
        benchlib.write_result("scale-out.json", result)


if __name__ == "__main__":
    main()
