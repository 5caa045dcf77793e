#!/usr/bin/python3
"""What a flood from one client costs a light one, measured against the light client alone in the
same run (issue 23's bar: its p99 at most 3x, aim 2x, and no timeout). One daemon (cpu backend,
default flags); the light client sends 200 requests/s, open loop, every answer checked. Beside it,
one flooding client at full speed: a closed loop of 2 threads (one request each in flight), or an
open loop far past the daemon's capacity, which keeps the flooding client's ring full:
  small          16-byte inputs at normal priority, closed loop
  large          64 KiB inputs at normal priority, closed loop
  large-high     64 KiB inputs claiming high priority without a grant (another user; root only)
  small-open     16-byte inputs, open loop at 400,000/s
  large-open     64 KiB inputs, open loop at 40,000/s
Each flood runs alone first and then beside the light client, and the light client alone runs
between them, so drift in the machine shows. Writes bench/results/hostile.json.
Usage: hostile.py   Environment: HOSTILE_S (seconds per light run, default 5), HOSTILE_DAEMON_NICE
(run the daemon at this nice value, e.g. -5: what a unit's Nice= gives it)."""

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

RUN_S = float(os.environ.get("HOSTILE_S", "5"))
NICE = os.environ.get("HOSTILE_DAEMON_NICE")
OTHER_UID = 65534
LARGE = "{workdir}/large-inputs.txt"  # 64 inputs of 64 KiB: random ones take seconds to make
# Closed loops (2 threads, one request each in flight), then open loops far past what the daemon
# can serve, which keep the flooding client's ring full.
FLOODS = {
    "small": ["--threads", "2", "--input-bytes", "16:16"],
    "large": ["--threads", "2", "--input-file", LARGE],
    "large-high": ["--threads", "2", "--input-file", LARGE, "--priority", "high"],
    "small-open": ["--rate", "400000", "--input-bytes", "16:16"],
    "large-open": ["--rate", "40000", "--input-file", LARGE],
}


def light(sock: Path) -> dict:
    summary = benchlib.run_stress(sock, "--rate", "200", "--duration", str(RUN_S), "--timeout-ms", "10000")
    normal = summary["by_class"]["normal"]
    return {k: normal[k] for k in ("sent", "ok", "errors", "wrong", "p50_us", "p99_us", "max_us")}


def write_large_inputs(workdir: Path):
    with open(LARGE.format(workdir=workdir), "w") as f:
        for i in range(64):
            f.write(f"{i}-".ljust(65536, chr(ord("a") + i % 26)) + "\n")
    os.chmod(LARGE.format(workdir=workdir), 0o644)


def flood(sock: Path, workdir: Path, name: str, seconds: float) -> subprocess.Popen:
    args = [benchlib.binary("tools/batchd-stress"), "--socket", str(sock), "--duration", str(seconds),
            "--timeout-ms", "10000", "--json", "--quiet", *(a.format(workdir=workdir) for a in FLOODS[name])]
    as_other = name.endswith("-high")
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            user=OTHER_UID if as_other else None, group=OTHER_UID if as_other else None)


def main():
    floods = [f for f in FLOODS if not f.endswith("-high") or os.geteuid() == 0]
    results = {"run_s": RUN_S, "daemon_nice": NICE, "build": benchlib.build_dir().name, "alone": [], "floods": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o711)
        write_large_inputs(workdir)
        flags = ["--backend", "cpu", "--allow-uid", str(OTHER_UID)]
        daemon, sock = benchlib.start_daemon(workdir, *flags)
        with daemon:
            if NICE is not None:
                subprocess.run(["renice", "-n", NICE, "-p", str(daemon.proc.pid)], check=True,
                               capture_output=True)
            results["alone"].append(light(sock))
            for name in floods:
                proc = flood(sock, workdir, name, RUN_S + 2)
                time.sleep(1)
                beside = light(sock)
                out, _ = proc.communicate(timeout=120)
                flood_summary = benchlib.last_json_line(out, f"flood {name}")
                results["floods"][name] = {
                    "light": beside,
                    "flood": {k: flood_summary[k] for k in ("sent", "ok", "errors", "wrong")},
                }
                results["alone"].append(light(sock))
                print(f"{name}: light p99 {beside['p99_us']:.0f} us beside the flood "
                      f"({flood_summary['ok']} flood answers)", flush=True)
    alone_p99 = sorted(r["p99_us"] for r in results["alone"])[len(results["alone"]) // 2]
    results["alone_p99_us_median"] = alone_p99
    for name, r in results["floods"].items():
        r["p99_ratio"] = r["light"]["p99_us"] / alone_p99
        print(f"{name}: light p99 {r['light']['p99_us']:.0f} us = {r['p99_ratio']:.1f}x alone "
              f"({alone_p99:.0f} us); light errors {r['light']['errors']}")
    benchlib.write_result("hostile.json", results)


if __name__ == "__main__":
    main()
