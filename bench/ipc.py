#!/usr/bin/python3
"""IPC round trip: batchd over shared memory (max-wait 0, cpu backend: SHA-256 at cost 1) beside
a Unix-domain-socket server and iceoryx 2.0 request/response doing the same work, with 1 and 8
client threads, each timed by the same closed loop (bench/ipc/ipc_bench.cpp).
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


def main():
    work = Path(tempfile.mkdtemp(prefix="batchd-ipc-"))
    try:
        runs = batchd_runs(work) + uds_runs(work)
        iox, iox_note = iceoryx_runs()
        runs += iox
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = {}
    for t in THREADS:
        by = {r["transport"]: r for r in runs if r["threads"] == t}
        for other in ("uds", "iceoryx", "iceoryx-poll"):
            if "batchd" in by and other in by:
                ratios[f"batchd/{other}@{t}"] = {
                    "p50": by["batchd"]["p50_us"] / by[other]["p50_us"],
                    "p99": by["batchd"]["p99_us"] / by[other]["p99_us"],
                }
    for key, r in ratios.items():
        print(f"ipc: {key:24} p50 x{r['p50']:.2f}  p99 x{r['p99']:.2f}")
    benchlib.write_result("ipc.json", {"duration_s": DURATION_S, "input_bytes": 64, "runs": runs,
                                       "ratios": ratios, "iceoryx_note": iox_note})


if __name__ == "__main__":
    main()
