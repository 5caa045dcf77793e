#!/usr/bin/python3
"""No cost on the fast path: a build of this tree against a build of an earlier commit, A/B in one
run, alternating (base, new, base, new) so the machine's drift falls on both. Each turn, on the
cpu backend with default flags:
  openloop   the highest open-loop rate over shared memory held with 0 errors and 0 wrong (a ladder
             of FASTPATH_RATES, FASTPATH_STEP_S seconds each, as bench/openloop.py)
  one_caller one client thread, closed loop: its p50
  http_v1    wrk at 64 connections (2 threads, 10 s) against batchd-http's POST /v1/batchstring
Reports each figure's median over the turns and new / base. Writes bench/results/fastpath_ab.json.
Usage: FASTPATH_BASE=DIR fastpath_ab.py   (DIR: the earlier commit's release build, e.g. made by
  git worktree add /tmp/base COMMIT && meson setup /tmp/base/build -Dbuildtype=release -Dtests=disabled)
Environment: BATCHD_BENCH_BUILD (the new build; default build-release), FASTPATH_TURNS (2)."""

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import workers as workers_bench  # noqa: E402

TURNS = int(os.environ.get("FASTPATH_TURNS", "2"))
RATES = [int(r) for r in os.environ.get("FASTPATH_RATES", "250000,500000,750000,1000000").split(",")]
workers_bench.STEP_S = float(os.environ.get("FASTPATH_STEP_S", "3"))  # the ladder's seconds a rate
DAEMON_FLAGS = ["--backend", "cpu", "--cost", "1", "--slots-per-client", "16384", "--max-input-bytes", "1024",
                "--max-output-bytes", "256"]
WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"input":"hello"}'
"""


WRK_SECONDS = 10


def wrk_rps(port: int, script: Path) -> float:
    out = subprocess.run(["wrk", "-t2", "-c64", f"-d{WRK_SECONDS}s", "--timeout", "5s", "-s", str(script),
                          f"http://127.0.0.1:{port}/v1/batchstring"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not match:
        raise SystemExit(f"bench: wrk printed no rate:\n{out}")
    return float(match.group(1))


def turn(work: Path, script: Path) -> dict:
    proc, sock = benchlib.start_daemon(work, *DAEMON_FLAGS)
    with proc:
        openloop = workers_bench.ladder(sock, RATES, "fast path")["highest_held"]
        one = benchlib.run_stress(sock, "--threads", "1", "--duration", "5", timeout_s=120)
        port = benchlib.free_port()
        http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}",
                                 "--socket", str(sock), "--log-level", "warn"], "http")
        with http:
            workers_bench.wait_ready(port)
            rps = wrk_rps(port, script)
    return {"openloop_held": openloop, "one_caller_p50_us": one["p50_us"], "http_v1_rps": rps}


def main():
    base = os.environ.get("FASTPATH_BASE")
    if not base:
        raise SystemExit(__doc__)
    builds = {"base": Path(base).resolve(), "new": benchlib.build_dir().resolve()}
    runs = {"base": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "post.lua"
        script.write_text(WRK_LUA)
        for t in range(TURNS):
            for label, build in builds.items():
                os.environ["BATCHD_BENCH_BUILD"] = str(build)
                r = turn(work, script)
                runs[label].append(r)
                print(f"turn {t + 1} {label}: open loop held {r['openloop_held']}/s, one caller p50 "
                      f"{r['one_caller_p50_us']:.1f} us, /v1 under wrk {r['http_v1_rps']:.0f}/s", flush=True)
    med = {label: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for label, rs in runs.items()}
    ratios = {k: med["new"][k] / med["base"][k] for k in med["new"]}
    print("new / base: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()), flush=True)
    os.environ["BATCHD_BENCH_BUILD"] = str(builds["new"])
    benchlib.write_result("fastpath_ab.json", {"builds": {k: str(v) for k, v in builds.items()}, "turns": runs,
                                               "median": med, "new_over_base": ratios})


if __name__ == "__main__":
    main()
