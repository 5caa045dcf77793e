#!/usr/bin/python3
"""Batching on the sim backend at a GPU-like cost (2 ms per batch + 20 us per request, 2 devices):
1. gain: the highest throughput with max-batch 1 against max-batch 64 (fixed rule), and the
   latency of each at 10,000 requests/s;
2. grid: the fixed rule's trade-off sweep: max-batch x max-wait x offered load, open loop (latency
   counted from each request's intended send time), every answer checked; beside each point, the
   analytic model's prediction (bench/model.py);
3. adaptive: the adaptive policy (defaults, no tuning) against every fixed setting of the grid at
   10 %, 25 %, 50 %, 75 %, 90 % and 110 %, all in this run (bench/results/sweep-adaptive.json);
4. closed: closed loops, adaptive against fixed 64 / 50 ms: a lone caller, 4 and 16 callers over
   shared memory, 16 HTTP connections under wrk (bench/results/closed-loop.json);
5. step: open-loop load 10 % -> 90 % -> 10 %, 5 s each, p99 per second, adaptive and fixed 64 / 50
   ms (bench/results/load-step.json).
Offered load is a fraction of the model's capacity at the fixed rule's default max-batch 64.
Writes bench/results/batching.json and bench/results/sweep.json (and the files named above).
Usage: sweep.py [gain] [grid] [spare0] [adaptive] [closed] [step]   (default all; spare0: the
large-batch, short-wait settings again with --spare-batches 0, written to
bench/results/sweep-spare0.json)
Environment: SWEEP_POINT_S (seconds per sweep point, default 1.2), SWEEP_QUICK=1 (a small grid)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from model import CostModel, predict  # noqa: E402

COST = CostModel(fixed_us=2000, per_item_us=20, devices=2)
QUICK = os.environ.get("SWEEP_QUICK") == "1"
BATCHES = [1, 8, 64] if QUICK else [1, 8, 16, 32, 64, 128]
WAITS_MS = [0, 5, 50] if QUICK else [0, 1, 5, 10, 25, 50, 100]
LOADS = [0.1, 0.5, 0.9] if QUICK else [0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.2]
POINT_S = float(os.environ.get("SWEEP_POINT_S", "1.0"))
WARMUP_S = 0.25
COOLDOWN_S = 0.15
GAIN_S = float(os.environ.get("GAIN_S", "4"))
# A request's deadline in the sweep: what an interactive caller would give. Past capacity the
# daemon rejects at admission what would miss it, so overload shows as rejections, not as an
# ever-growing queue.
TIMEOUT_MS = 1000
REFERENCE_CAPACITY = COST.capacity(64)
# The same loads with --spare-batches 0 (a batch goes only to a free device lane), for the
# settings where the main grid says it matters: large batches, short waits.
SPARE0_SETTINGS = [(64, 0), (64, 1), (64, 5), (128, 0), (128, 1), (128, 5)]


ADAPTIVE_LOADS = [0.1, 0.5, 0.9] if QUICK else [0.1, 0.25, 0.5, 0.75, 0.9, 1.1]
CLOSED_S = int(os.environ.get("CLOSED_S", "5"))
ADAPTIVE_WARMUP_S = 1.0
STEP_S = 5  # seconds per phase of the load step


def sim_flags() -> list:
    return ["--backend", "sim", "--sim-devices", str(COST.devices), "--sim-fixed-us", str(int(COST.fixed_us)),
            "--sim-per-item-us", str(int(COST.per_item_us))]


def daemon_flags(max_batch: int, max_wait_ms: float, spare_batches: int = 2) -> list:
    return ["--policy", "fixed", "--spare-batches", str(spare_batches), "--backend", "sim", "--sim-devices", str(COST.devices), "--sim-fixed-us", str(int(COST.fixed_us)),
            "--sim-per-item-us", str(int(COST.per_item_us)), "--max-batch", str(max_batch),
            "--max-wait-ms", str(max_wait_ms)]


def stress_flags(rate, duration, warmup_s=None) -> list:
    # Load runs WARMUP_S before and COOLDOWN_S after the measured window, uncounted: the window
    # sees steady state, and its last batch fills as it would under continuing load instead of
    # waiting for its timer (longer than the longest max-wait).
    return ["--expect-sim", "1", "--input-bytes", "16:64", "--timeout-ms", str(TIMEOUT_MS), "--rate", str(rate),
            "--duration", str(duration), "--warmup", str(warmup_s or WARMUP_S), "--cooldown", str(COOLDOWN_S)]


def summary(result: dict) -> dict:
    keep = ("sent", "ok", "errors", "wrong", "rps", "p50_us", "p90_us", "p99_us", "p999_us", "max_us",
            "errors_by_kind", "duration_s")
    out = {k: result[k] for k in keep if k in result}
    out["goodput"] = result["ok"] / result["duration_s"] if result.get("duration_s") else 0.0
    return out


def batching_gain(work: Path) -> dict:
    gain = {"cost": COST.__dict__, "runs": []}
    for max_batch in (1, 64):
        proc, sock = benchlib.start_daemon(work, *daemon_flags(max_batch, 50))
        with proc:
            # Highest throughput: offered well past the model's capacity; what is answered (the
            # rest is rejected at admission) is what the setting can do, once the admitted backlog
            # has reached its bound (hence the long warm-up: until then more is admitted than
            # served). Twice the capacity where the load generator can offer it.
            overload = round(COST.capacity(max_batch) * (2.0 if COST.capacity(max_batch) < 20000 else 1.25))
            peak = summary(benchlib.run_stress(sock, *stress_flags(overload, GAIN_S, warmup_s=1.5)))
            at_10k = summary(benchlib.run_stress(sock, *stress_flags(10000, GAIN_S)))
        gain["runs"].append({"max_batch": max_batch, "max_wait_ms": 50, "offered_for_peak": overload,
                             "peak": peak, "at_10k": at_10k, "model_capacity": COST.capacity(max_batch)})
        print(f"gain: max-batch {max_batch:3}: peak {peak['goodput']:8.0f} ok/s (model {COST.capacity(max_batch):6.0f});"
              f" at 10k/s: ok {at_10k['goodput']:7.0f}/s p50 {at_10k['p50_us'] / 1e3:7.2f} ms"
              f" p99 {at_10k['p99_us'] / 1e3:7.2f} ms errors {at_10k['errors']}")
    runs = {r["max_batch"]: r for r in gain["runs"]}
    gain["throughput_gain"] = runs[64]["peak"]["goodput"] / max(1.0, runs[1]["peak"]["goodput"])
    print(f"gain: max-batch 64 / max-batch 1 throughput: x{gain['throughput_gain']:.1f}")
    return gain


def model_entry(model) -> dict:
    return {"batch": model.batch, "utilization": model.utilization, "mode": model.mode,
            "p50_ms": model.p50_ms if model.stable else None, "p99_ms": model.p99_ms if model.stable else None,
            "stable": model.stable}


def sweep(work: Path, settings, spare_batches: int, loads=None) -> list:
    loads = loads or LOADS
    points = []
    started = time.monotonic()
    for max_batch, wait_ms in settings:
        proc, sock = benchlib.start_daemon(work, *daemon_flags(max_batch, wait_ms, spare_batches))
        with proc:
            for load in loads:
                rate = load * REFERENCE_CAPACITY
                measured = summary(benchlib.run_stress(sock, *stress_flags(round(rate), POINT_S)))
                model = predict(COST, max_batch, wait_ms, rate, spare_batches)
                points.append({"max_batch": max_batch, "max_wait_ms": wait_ms, "spare_batches": spare_batches,
                               "load": load, "rate": rate,
                               "measured": measured,
                               "model": model_entry(model)})
        print(f"sweep: max-batch {max_batch:3} max-wait {wait_ms:3} ms spare {spare_batches} done "
              f"({time.monotonic() - started:5.0f} s): p99 ms by load "
              + " ".join(f"{p['measured']['p99_us'] / 1e3:.1f}" for p in points[-len(loads):]))
    return points


def held(measured: dict) -> bool:
    """Every request answered, right, in time: nothing refused, timed out or failed."""
    return measured["errors"] == 0 and measured["wrong"] == 0 and measured["ok"] > 0


def adaptive_vs_fixed(work: Path) -> dict:
    """The adaptive policy with its defaults against every fixed setting of the grid, same loads,
    same run; the adaptive points are measured before and after the grid, and the worse of the
    two counts (the machine's drift over the grid's minutes would otherwise favour one side)."""
    def adaptive_pass():
        # One daemon through the loads, as for each fixed setting, but with a warm-up of a second
        # at each load rather than WARMUP_S: the arrival rate the policy sees is an EWMA that
        # follows a step within about a second (the load step part measures that transient).
        out = []
        proc, sock = benchlib.start_daemon(work, *sim_flags())
        with proc:
            for load in ADAPTIVE_LOADS:
                out.append(summary(benchlib.run_stress(
                    sock, *stress_flags(round(load * REFERENCE_CAPACITY), POINT_S, warmup_s=ADAPTIVE_WARMUP_S))))
        return out
    before = adaptive_pass()
    grid = sweep(work, [(b, w) for b in BATCHES for w in WAITS_MS], 2, ADAPTIVE_LOADS)
    after = adaptive_pass()
    rows = []
    for i, load in enumerate(ADAPTIVE_LOADS):
        runs = [before[i], after[i]]
        adaptive = max(runs, key=lambda m: (not held(m), m["p99_us"]))
        points = [p for p in grid if p["load"] == load]
        held_points = [p for p in points if held(p["measured"])]
        best = min(held_points, key=lambda p: p["measured"]["p99_us"]) if held_points else None
        seed = next(p for p in points if p["max_batch"] == 64 and p["max_wait_ms"] == 50)
        row = {"load": load, "rate": load * REFERENCE_CAPACITY, "adaptive": adaptive, "adaptive_runs": runs,
               "best_fixed": best and {"max_batch": best["max_batch"], "max_wait_ms": best["max_wait_ms"],
                                       "measured": best["measured"]},
               "fixed_64_50": seed["measured"], "fixed_settings_held": len(held_points)}
        if best:
            bound = max(best["measured"]["p99_us"] * 1.1, best["measured"]["p99_us"] + 500)
            row["within_bound"] = held(adaptive) and adaptive["p99_us"] <= bound
            row["bound_us"] = bound
        else:
            row["within_bound"] = True  # no fixed setting held this load: nothing to be near
        row["holds_if_any_holds"] = held(adaptive) or not held_points
        rows.append(row)
        best_text = (f"best fixed ({best['max_batch']}, {best['max_wait_ms']} ms) p99 {best['measured']['p99_us'] / 1e3:.2f} ms"
                     if best else "no fixed setting held")
        print(f"adaptive: load {load:4.2f}: adaptive p99 {adaptive['p99_us'] / 1e3:6.2f} ms "
              f"({'held' if held(adaptive) else 'NOT held'}); {best_text}; 64/50 p99 "
              f"{seed['measured']['p99_us'] / 1e3:.2f} ms; within bound: {row['within_bound']}")
    return {"cost": COST.__dict__, "reference_capacity": REFERENCE_CAPACITY, "timeout_ms": TIMEOUT_MS,
            "point_s": POINT_S, "loads": ADAPTIVE_LOADS, "batches": BATCHES, "waits_ms": WAITS_MS,
            "rows": rows, "grid": grid}


WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"input":"a request of some forty bytes, give or take"}'
function done(summary, latency, requests)
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"non_2xx":%d,"errors":%d,'
    .. '"p50_us":%.1f,"p99_us":%.1f,"max_us":%.1f}\\n', summary.requests, summary.duration,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout, latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def wrk_http(work: Path, sock: Path, connections: int, seconds: float) -> dict:
    """batchd-http in front of the daemon, wrk closed loop with `connections` keep-alive connections."""
    port = benchlib.free_port()
    http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}",
                             "--socket", str(sock), "--log-level", "warn"], "batchd-http")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        script = work / "post.lua"
        script.write_text(WRK_LUA)
        done = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "5s", "-s", str(script),
                               f"http://127.0.0.1:{port}/v1/batchstring"], capture_output=True, text=True,
                              timeout=seconds + 60)
        for line in done.stdout.splitlines():
            if line.startswith("WRKJSON "):
                out = json.loads(line[len("WRKJSON "):])
                out["rps"] = out["requests"] / (out["duration_us"] / 1e6)
                out["connections"] = connections
                return out
        raise SystemExit(f"bench: wrk printed no summary:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    finally:
        http.stop()


def closed_shm(sock: Path, callers: int) -> dict:
    return summary(benchlib.run_stress(sock, "--expect-sim", "1", "--input-bytes", "16:64", "--threads", str(callers),
                                       "--duration", str(CLOSED_S)))


def closed_loops(work: Path) -> dict:
    """Closed loops, where the fixed rule's timer hurts most: callers that wait for their answer
    before sending again never fill a batch of 64."""
    out = {"cost": COST.__dict__, "seconds": CLOSED_S, "policies": {}}
    for name, flags in (("fixed_64_50", daemon_flags(64, 50)), ("adaptive", sim_flags())):
        proc, sock = benchlib.start_daemon(work, *flags)
        with proc:
            runs = {}
            for callers in (1, 4, 16):
                runs[f"shm_{callers}"] = closed_shm(sock, callers)
            runs["http_16_wrk"] = wrk_http(work, sock, 16, CLOSED_S)
        out["policies"][name] = runs
        print(f"closed: {name}: lone p50 {runs['shm_1']['p50_us'] / 1e3:.2f} ms; 4 callers "
              f"{runs['shm_4']['rps']:.0f}/s p99 {runs['shm_4']['p99_us'] / 1e3:.2f} ms; 16 callers "
              f"{runs['shm_16']['rps']:.0f}/s p99 {runs['shm_16']['p99_us'] / 1e3:.2f} ms; HTTP 16 (wrk) "
              f"{runs['http_16_wrk']['rps']:.0f}/s p99 {runs['http_16_wrk']['p99_us'] / 1e3:.2f} ms")
    # The best fixed setting in hindsight for k closed-loop callers: batches of exactly each
    # device's share, k / devices, with a timer (3 ms) longer than the callers take to come back.
    # It measures the ceiling the callers' own round trip (answer -> caller -> next request ->
    # daemon) leaves, which the analytic k / t(k / devices) leaves out.
    hindsight = {}
    for callers in (4, 16):
        proc, sock = benchlib.start_daemon(work, *daemon_flags(callers // COST.devices, 3))
        with proc:
            hindsight[f"shm_{callers}"] = closed_shm(sock, callers)
            if callers == 16:
                hindsight["http_16_wrk"] = wrk_http(work, sock, 16, CLOSED_S)
    out["policies"]["fixed_share"] = hindsight
    # The analytic ceiling of k closed-loop callers on the devices: k requests per batch time,
    # spread over the devices (k / devices requests each): k / t(k / devices).
    out["ceiling"] = {str(k): k / ((COST.fixed_us + COST.per_item_us * k / COST.devices) / 1e6) for k in (1, 4, 16)}
    return out


def load_step(work: Path) -> dict:
    """10 % -> 90 % -> 10 % of capacity, STEP_S seconds each, one stress run per second so that each
    second has its own p99 (runs follow each other with no gap but a process start)."""
    out = {"cost": COST.__dict__, "phases": [0.1, 0.9, 0.1], "phase_s": STEP_S, "policies": {}}
    for name, flags in (("adaptive", sim_flags()), ("fixed_64_50", daemon_flags(64, 50))):
        proc, sock = benchlib.start_daemon(work, *flags)
        seconds = []
        with proc:
            for load in out["phases"]:
                for _ in range(STEP_S):
                    m = summary(benchlib.run_stress(sock, "--expect-sim", "1", "--input-bytes", "16:64",
                                                    "--timeout-ms", str(TIMEOUT_MS), "--rate",
                                                    str(round(load * REFERENCE_CAPACITY)), "--duration", "1"))
                    m["load"] = load
                    seconds.append(m)
        out["policies"][name] = seconds
        print(f"step: {name}: p99 ms per second " + " ".join(f"{m['p99_us'] / 1e3:.1f}" for m in seconds)
              + f"; errors {sum(m['errors'] for m in seconds)}")
    return out


def main():
    parts = sys.argv[1:] or ["gain", "grid", "spare0", "adaptive", "closed", "step"]
    work = Path(tempfile.mkdtemp(prefix="batchd-sweep-"))
    try:
        if "adaptive" in parts:
            benchlib.write_result("sweep-adaptive.json", adaptive_vs_fixed(work))
        if "closed" in parts:
            benchlib.write_result("closed-loop.json", closed_loops(work))
        if "step" in parts:
            benchlib.write_result("load-step.json", load_step(work))
        if "gain" in parts:
            benchlib.write_result("batching.json", batching_gain(work))
        if "spare0" in parts:
            spare0 = sweep(work, [s for s in SPARE0_SETTINGS if s[0] in BATCHES and s[1] in WAITS_MS], 0)
            benchlib.write_result("sweep-spare0.json", {"points": spare0})
        points = sweep(work, [(b, w) for b in BATCHES for w in WAITS_MS], 2) if "grid" in parts else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if points is None:
        return
    benchlib.write_result("sweep.json", {
        "cost": COST.__dict__, "reference_capacity": REFERENCE_CAPACITY, "timeout_ms": TIMEOUT_MS,
        "point_s": POINT_S, "warmup_s": WARMUP_S, "cooldown_s": COOLDOWN_S, "batches": BATCHES, "waits_ms": WAITS_MS, "loads": LOADS, "points": points})


if __name__ == "__main__":
    main()
