#!/usr/bin/python3
"""How the daemon behaves as a service, measured (the unit tests assert only that nothing is lost
or wrong; how well is a number, and numbers are measured here, each against a baseline taken in
the same run):
1. overload: one sim device (20 ms + 0.2 ms per request, max-batch 32, about 1,200 requests/s).
   Baseline: its saturated throughput, closed loop. Then 3x that, open loop, 300 ms deadlines:
   the share of the capacity that still goes to answers, the share of accepted requests that miss
   their deadline, the answered p99 against the deadline, and the daemon's RSS growth.
2. idle: the daemon's CPU while clients are attached and quiet, against its CPU at 1,000
   requests/s (the ratio a spinning drain loop would drive towards 1).
3. a slow device: two sim devices, one 4x slower; the share of batches each ran (the router
   should give the slow one about a quarter as many).
Writes bench/results/service.json. Usage: service.py   Environment: SERVICE_S (seconds per
measured run, default 10)."""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

RUN_S = float(os.environ.get("SERVICE_S", "10"))
DEADLINE_MS = 300
ONE_DEVICE = ["--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "20000", "--sim-per-item-us", "200",
              "--max-batch", "32", "--max-wait-ms", "5"]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class RssSampler:
    """The daemon's peak RSS while a run goes on, sampled every 50 ms."""

    def __init__(self, pid: int):
        self.pid, self.start, self.peak = pid, rss_kib(pid), rss_kib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_kib(self.pid))

    def stop(self):
        self._stop.set()
        self._thread.join()


def overload(work: Path) -> dict:
    daemon, sock = benchlib.start_daemon(work, *ONE_DEVICE)
    with daemon:
        capacity = benchlib.run_stress(sock, "--expect-sim", "1", "--threads", "64", "--duration", str(RUN_S / 2),
                                       "--input-bytes", "16:64", "--timeout-ms", "10000")
        rate = 3 * capacity["rps"]
        sampler = RssSampler(daemon.proc.pid)
        over = benchlib.run_stress(sock, "--expect-sim", "1", "--rate", f"{rate:.0f}", "--duration", str(RUN_S),
                                   "--warmup", "1", "--input-bytes", "16:64", "--timeout-ms", str(DEADLINE_MS))
        sampler.stop()
    kinds = over.get("errors_by_kind", {})
    accepted = over["ok"] + over["wrong"] + kinds.get("timeout", 0)
    return {
        "capacity_rps": capacity["rps"],
        "offered_rps": rate,
        "deadline_ms": DEADLINE_MS,
        "result": over,
        "goodput_over_capacity": over["ok"] / over["duration_s"] / capacity["rps"],
        "late_share_of_accepted": kinds.get("timeout", 0) / max(1, accepted),
        "overloaded_share": kinds.get("overloaded", 0) / max(1, over["sent"]),
        "p99_over_deadline": over["p99_us"] / 1000 / DEADLINE_MS,
        "rss_start_kib": sampler.start,
        "rss_peak_kib": sampler.peak,
    }


def idle(work: Path) -> dict:
    daemon, sock = benchlib.start_daemon(work, "--backend", "cpu", "--max-wait-ms", "1")
    with daemon:
        pid = daemon.proc.pid
        busy_start = cpu_seconds(pid)
        busy = benchlib.run_stress(sock, "--rate", "1000", "--duration", str(RUN_S / 2), "--input-bytes", "16:64")
        busy_cpu = (cpu_seconds(pid) - busy_start) / busy["duration_s"]
        # 16 clients attached for the whole window, each sending one request at its start.
        quiet_s = RUN_S / 2
        quiet = [subprocess.Popen([benchlib.binary("tools/batchd-stress"), "--socket", str(sock), "--quiet",
                                   "--rate", "0.001", "--duration", str(quiet_s + 3), "--timeout-ms", "1000"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(16)]
        time.sleep(1.5)  # attached, first requests answered
        idle_start = cpu_seconds(pid)
        time.sleep(quiet_s)
        idle_cpu = (cpu_seconds(pid) - idle_start) / quiet_s
        for q in quiet:
            q.terminate()
            q.wait()
    return {"idle_clients": 16, "idle_cpu_share_of_core": idle_cpu, "busy_rps": busy["rps"],
            "busy_cpu_share_of_core": busy_cpu, "idle_over_busy": idle_cpu / busy_cpu if busy_cpu > 0 else None}


def slow_device(work: Path) -> dict:
    daemon, sock = benchlib.start_daemon(work, "--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "500",
                                         "--sim-per-item-us", "10", "--sim-slow", "1:4", "--max-wait-ms", "1")
    with daemon:
        run = benchlib.run_stress(sock, "--expect-sim", "1", "--threads", "8", "--duration", str(RUN_S / 2),
                                  "--input-bytes", "16:64")
        status = json.loads(subprocess.run([benchlib.binary("tools/batchctl"), "--socket", str(sock), "--json"],
                                           capture_output=True, text=True, check=True).stdout)
    batches = [d["batches_ok"] for d in status["devices"]]
    return {"slow_factor": 4, "result": run, "batches_per_device": batches,
            "fast_over_slow": batches[0] / batches[1] if batches[1] else None}


def main():
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        work = Path(tmp)
        print("== overload (3x one device's capacity)")
        o = overload(work)
        print(f"   capacity {o['capacity_rps']:.0f}/s; at 3x: goodput/capacity {o['goodput_over_capacity']:.2f}, "
              f"late {100 * o['late_share_of_accepted']:.2f}% of accepted, p99/deadline {o['p99_over_deadline']:.2f}, "
              f"RSS {o['rss_start_kib']} -> {o['rss_peak_kib']} KiB")
        print("== idle")
        i = idle(work)
        print(f"   idle CPU {100 * i['idle_cpu_share_of_core']:.2f}% of a core with {i['idle_clients']} quiet clients; "
              f"at {i['busy_rps']:.0f}/s {100 * i['busy_cpu_share_of_core']:.1f}%")
        print("== a 4x slower device")
        s = slow_device(work)
        print(f"   batches per device {s['batches_per_device']}; fast/slow {s['fast_over_slow']}")
    benchlib.write_result("service.json", {"run_s": RUN_S, "overload": o, "idle": i, "slow_device": s})


if __name__ == "__main__":
    main()
