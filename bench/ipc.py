#!/usr/bin/python3
"""IPC round trip: batchd over shared memory (max-wait 0, cpu backend: SHA-256 at cost 1) beside
a Unix-domain-socket server and iceoryx 2.0 request/response doing the same work, with 1 and 8
client threads, each timed by the same closed loop (bench/ipc/ipc_bench.cpp). Every transport is
measured IPC_REPEATS times, interleaved, so the ratios come from the same stretch of machine time
and the spread across repeats shows whether a latency is stable or bimodal.
Writes bench/results/ipc.json."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

DURATION_S = float(os.environ.get("IPC_DURATION", "4"))
REPEATS = int(os.environ.get("IPC_REPEATS", "3"))
THREADS = [1, 8]


def measure(transport: str, threads: int, endpoint: str = "") -> dict:
    args = [benchlib.binary("bench/ipc/ipc-bench"), "--transport", transport, "--threads", str(threads),
            "--duration", str(DURATION_S), "--warmup", "0.5", "--input-bytes", "64"]
    if endpoint:
        args += ["--endpoint", endpoint]
    done = subprocess.run(args, capture_output=True, text=True, timeout=DURATION_S + 60)
    result = benchlib.last_json_line(done.stdout + "\n" + done.stderr, f"ipc-bench {transport}")
    if done.returncode != 0:
        print(f"ipc: {transport} x{threads} ended with status {done.returncode}: {done.stderr.strip()}")
    print(f"ipc: {transport:13} threads {threads}: p50 {result['p50_us']:8.1f} us  p99 {result['p99_us']:8.1f} us"
          f"  {result['rps']:9.0f} req/s  errors {result['errors']} wrong {result['wrong']}")
    return result


def batchd_runs(work: Path) -> list:
    # One cpu worker: the answer is computed on one thread, as the other servers do.
    with benchlib.start_daemon(work, "--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "0")[0] as _:
        return [measure("batchd", t, str(work / "batchd.sock")) for t in THREADS]


def uds_runs(work: Path) -> list:
    sock = work / "uds.sock"
    with benchlib.Process([benchlib.binary("bench/ipc/ipc-uds-server"), "--socket", str(sock)], "uds") as server:
        benchlib.wait_for_path(sock, server, "ipc-uds-server")
        return [measure("uds", t, str(sock)) for t in THREADS]


def iceoryx_runs() -> tuple[list, str]:
    roudi = shutil.which("iox-roudi")
    if roudi is None or not (benchlib.build_dir() / "bench/ipc/ipc-iox-server").exists():
        return [], "iceoryx is not installed (bench/run-all.sh installs Debian's iceoryx and rebuilds)"
    runs = []
    with benchlib.Process([roudi], "roudi") as daemon:
        time.sleep(1.0)  # RouDi maps its memory pools before it accepts applications
        if not daemon.alive():
            return [], "iox-roudi did not start: " + daemon.log_tail()
        for mode, poll in (("iceoryx", False), ("iceoryx-poll", True)):
            server_args = [benchlib.binary("bench/ipc/ipc-iox-server")] + (["--busy-poll"] if poll else [])
            with benchlib.Process(server_args, "iox-server"):
                time.sleep(0.5)
                # Busy polling on both sides needs a core each: only the single-thread case is fair.
                for t in ([1] if poll else THREADS):
                    runs.append(measure(mode, t))
    return runs, ""


def median(values: list) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize(values: list) -> dict:
    return {"median": median(values), "min": min(values), "max": max(values), "each": values}


def ratios_of(runs: list) -> dict:
    """batchd against each reference, per repeat, then summarized: p50 and p99 latency (lower is
    better for batchd) and throughput (higher is better)."""
    out = {}
    for t in THREADS:
        for other in ("uds", "iceoryx", "iceoryx-poll"):
            per = {"p50": [], "p99": [], "rps": []}
            for rep in range(REPEATS):
                by = {r["transport"]: r for r in runs if r["threads"] == t and r["repeat"] == rep}
                if "batchd" not in by or other not in by:
                    continue
                per["p50"].append(by["batchd"]["p50_us"] / by[other]["p50_us"])
                per["p99"].append(by["batchd"]["p99_us"] / by[other]["p99_us"])
                per["rps"].append(by["batchd"]["rps"] / by[other]["rps"])
            if per["p50"]:
                out[f"batchd/{other}@{t}"] = {k: summarize(v) for k, v in per.items()}
    return out


def main():
    work = Path(tempfile.mkdtemp(prefix="batchd-ipc-"))
    runs, iox_note = [], ""
    try:
        for rep in range(REPEATS):
            print(f"ipc: repeat {rep + 1} of {REPEATS}")
            batch = batchd_runs(work) + uds_runs(work)
            iox, iox_note = iceoryx_runs()
            for r in batch + iox:
                r["repeat"] = rep
            runs += batch + iox
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = ratios_of(runs)
    for key, r in ratios.items():
        print(f"ipc: {key:24} p50 x{r['p50']['median']:.2f} ({r['p50']['min']:.2f}-{r['p50']['max']:.2f})"
              f"  p99 x{r['p99']['median']:.2f}  throughput x{r['rps']['median']:.2f}"
              f" ({r['rps']['min']:.2f}-{r['rps']['max']:.2f})")
    benchlib.write_result("ipc.json", {"duration_s": DURATION_S, "repeats": REPEATS, "input_bytes": 64, "runs": runs,
                                       "ratios": ratios, "iceoryx_note": iox_note})


if __name__ == "__main__":
    main()
