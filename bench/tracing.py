#!/usr/bin/python3
"""docs/BENCHMARKS.md section 3g: what tracing costs (docs/TRACING.md), A/B in one run against a
build of the commit before tracing, alternating (base, off, 1 in 1,000, every request) each turn so
the machine's drift falls on all. Each variant runs bench/fastpath_ab.py's three figures on the cpu
backend: the highest open-loop rate held over shared memory, one caller's p50, and /v1 under wrk at
64 connections; the traced variants give batchd and batchd-http --trace-endpoint of a collector in
this process (an OTLP/HTTP receiver that counts what it is sent), the rate their --trace-rate. The
order of the variants turns each turn, and each starts once the receiver has been idle for a second:
every request traced leaves a backlog of exports that would otherwise fall on the next variant.
Under wrk it also reads the CPU time batchd and batchd-http spent per request (from /proc), a figure
the machine's noise blurs less than a rate on two cores that wrk shares. Reports each figure's
median over the turns and variant / base. Writes bench/results/tracing.json.
Usage: TRACING_BASE=DIR tracing.py   (DIR: the earlier commit's release build)
Environment: BATCHD_BENCH_BUILD (the new build; default build-release), TRACING_TURNS (3)."""

import http.server
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import fastpath_ab  # noqa: E402
import workers as workers_bench  # noqa: E402

TURNS = int(os.environ.get("TRACING_TURNS", "5"))


def cpu_seconds(pid: int) -> float:
    """A process's user and system time so far, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Collector:
    """Takes every export and counts its bytes: the spans' cost is batchd's, not a decoder's."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        self.last_export = time.monotonic()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(n)
                collector.exports += 1
                collector.bytes += n
                collector.last_export = time.monotonic()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_idle(self, quiet_s: float = 1.0, limit_s: float = 60.0) -> None:
        """Until no export has come for quiet_s (at most limit_s)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() - self.last_export < quiet_s and time.monotonic() < deadline:
            time.sleep(0.1)


# Every request traced holds far less than the fast path's lowest rung: its ladder starts lower.
EVERY_RATES = [10_000, 25_000, 50_000, 100_000, 250_000]


def turn(work: Path, script: Path, trace_flags: list, rates: list) -> dict:
    proc, sock = benchlib.start_daemon(work, *fastpath_ab.DAEMON_FLAGS, *trace_flags)
    with proc:
        openloop = workers_bench.ladder(sock, rates, "tracing")["highest_held"]
        one = benchlib.run_stress(sock, "--threads", "1", "--duration", "5", timeout_s=120)
        port = benchlib.free_port()
        http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}",
                                 "--socket", str(sock), "--log-level", "warn", *trace_flags], "http")
        with http:
            workers_bench.wait_ready(port)
            pids = (proc.proc.pid, http.proc.pid)
            before = [cpu_seconds(pid) for pid in pids]
            rps = fastpath_ab.wrk_rps(port, script)
            spent = sum(cpu_seconds(pid) for pid in pids) - sum(before)
    return {"openloop_held": openloop, "one_caller_p50_us": one["p50_us"], "http_v1_rps": rps,
            "http_v1_cpu_us": 1e6 * spent / (rps * fastpath_ab.WRK_SECONDS)}


def main():
    base = os.environ.get("TRACING_BASE")
    if not base:
        raise SystemExit(__doc__)
    new = benchlib.build_dir().resolve()
    collector = Collector()
    trace = ["--trace-endpoint", collector.endpoint]
    variants = {"base": (Path(base).resolve(), []), "off": (new, []),
                "rate_1000": (new, trace + ["--trace-rate", "1000"]), "every": (new, trace + ["--trace-rate", "1"])}
    runs = {label: [] for label in variants}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "post.lua"
        script.write_text(fastpath_ab.WRK_LUA)
        labels = list(variants)
        for t in range(TURNS):
            for label in labels[t % len(labels):] + labels[:t % len(labels)]:
                build, flags = variants[label]
                collector.wait_idle()
                os.environ["BATCHD_BENCH_BUILD"] = str(build)
                r = turn(work, script, flags, EVERY_RATES if label == "every" else fastpath_ab.RATES)
                runs[label].append(r)
                print(f"turn {t + 1} {label}: open loop held {r['openloop_held']}/s, one caller p50 "
                      f"{r['one_caller_p50_us']:.1f} us, /v1 under wrk {r['http_v1_rps']:.0f}/s "
                      f"({r['http_v1_cpu_us']:.2f} CPU us a request)", flush=True)
    med = {label: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for label, rs in runs.items()}
    ratios = {label: {k: med[label][k] / med["base"][k] for k in med[label]} for label in med if label != "base"}
    for label, r in ratios.items():
        print(f"{label} / base: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
    print(f"collector: {collector.exports} exports, {collector.bytes / 1e6:.1f} MB", flush=True)
    os.environ["BATCHD_BENCH_BUILD"] = str(new)
    benchlib.write_result("tracing.json", {"builds": {"base": str(Path(base).resolve()), "new": str(new)},
                                           "turns": runs, "median": med, "over_base": ratios,
                                           "collector": {"exports": collector.exports, "bytes": collector.bytes}})


if __name__ == "__main__":
    main()
