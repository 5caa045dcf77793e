#!/usr/bin/python3
"""A worker that hangs beside a good one (issue 46), as a new user runs it, HUNG_RUNS times in a row:
batchd --backend workers --device-timeout-ms 1000, batchd-worker --backend cpu, and a Python worker
whose model sleeps forever on its 21st batch; batchd-stress --rate 3000 --duration 12 over shared
memory. Each run: answered, errors, overloaded, p99 and max against the hang timeout (the bar: 0
errors, p99 within the timeout + 100 ms), the hangs the daemon saw and its laggard verdicts.
Writes bench/results/hung_worker.json. Environment: BATCHD_BENCH_BUILD (default build-release),
HUNG_RUNS (5), HUNG_RATE (3000), HUNG_SECONDS (12)."""

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import workers as workers_bench  # noqa: E402

RUNS = int(os.environ.get("HUNG_RUNS", "5"))
RATE = int(os.environ.get("HUNG_RATE", "3000"))
SECONDS = float(os.environ.get("HUNG_SECONDS", "12"))
TIMEOUT_MS = 1000
HANGING_WORKER = """
import hashlib, sys, time, batchd
batches = 0
def model(texts):
    global batches
    batches += 1
    if batches == 21:
        time.sleep(1e9)
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]
batchd.Worker(sys.argv[1], name="python-hangs").serve(model)
"""


def one_run(work: Path) -> dict:
    sock = work / "batchd.sock"
    if sock.exists():
        sock.unlink()
    # At info: the laggard verdicts and the hang are what the run is about.
    daemon = benchlib.Process([benchlib.binary("daemon/batchd"), "--socket", str(sock), "--backend", "workers",
                               "--device-timeout-ms", str(TIMEOUT_MS)], "batchd")
    benchlib.wait_for_path(sock, daemon, "batchd")
    good = workers_bench.worker_process(sock, "--backend", "cpu", name="cpu-worker")
    hanging = workers_bench.worker_process(sock, python=HANGING_WORKER, name="python-hangs")
    log = ""
    try:
        workers_bench.await_workers(sock, 2)
        run = benchlib.run_stress(sock, "--rate", str(RATE), "--duration", str(SECONDS), timeout_s=SECONDS + 120)
        daemon.log.flush()
        log = Path(daemon.log.name).read_text(errors="replace")
    finally:
        hanging.proc.kill()  # its model sleeps: SIGTERM would wait for it
        hanging.proc.wait()
        for proc in (good, daemon):
            proc.stop()
    return {"ok": run["ok"], "sent": run["sent"], "errors": run["errors"], "wrong": run["wrong"],
            "overloaded": run["errors_by_kind"]["overloaded"], "p99_us": run["p99_us"], "max_us": run["max_us"],
            "hangs": log.count("ran past"), "laggard_verdicts": log.count("probes only until it is faster")}


def main():
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(RUNS):
            r = one_run(Path(tmp))
            runs.append(r)
            print(f"hung worker run {i + 1}: {r['ok']}/{r['sent']} ok, {r['errors']} errors ({r['overloaded']} "
                  f"overloaded), {r['wrong']} wrong, p99 {r['p99_us']:.0f} us, max {r['max_us'] / 1000:.0f} ms, "
                  f"{r['hangs']} hang(s) seen, {r['laggard_verdicts']} laggard verdict(s)", flush=True)
            time.sleep(0.5)
    bar_us = (TIMEOUT_MS + 100) * 1000
    held = all(r["errors"] == 0 and r["wrong"] == 0 and r["p99_us"] <= bar_us and r["hangs"] > 0 for r in runs)
    print(f"hung worker: {'every run held' if held else 'NOT held'} (0 errors, p99 within {bar_us / 1000:.0f} ms)")
    benchlib.write_result("hung_worker.json", {"rate": RATE, "seconds": SECONDS, "device_timeout_ms": TIMEOUT_MS,
                                               "runs": runs, "held": held})


if __name__ == "__main__":
    main()
