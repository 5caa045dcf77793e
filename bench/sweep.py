#!/usr/bin/python3
"""Batching on the sim backend at a GPU-like cost (2 ms per batch + 20 us per request, 2 devices):
1. the batching gain: the highest throughput with max-batch 1 against max-batch 64, and the
   latency of each at 10,000 requests/s;
2. the trade-off sweep: max-batch x max-wait x offered load, open loop (latency counted from each
   request's intended send time), every answer checked; beside each point, the analytic model's
   prediction (bench/model.py).
Offered load is a fraction of the model's capacity at the default max-batch 64.
Writes bench/results/batching.json and bench/results/sweep.json.
Usage: sweep.py [gain] [grid] [spare0]   (default all; spare0: the large-batch, short-wait
settings again with --spare-batches 0, written to bench/results/sweep-spare0.json)
Environment: SWEEP_POINT_S (seconds per sweep point, default 1.2), SWEEP_QUICK=1 (a small grid)."""

import os
import shutil
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


def daemon_flags(max_batch: int, max_wait_ms: float, spare_batches: int = 2) -> list:
    return ["--spare-batches", str(spare_batches), "--backend", "sim", "--sim-devices", str(COST.devices), "--sim-fixed-us", str(int(COST.fixed_us)),
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


def sweep(work: Path, settings, spare_batches: int) -> list:
    points = []
    started = time.monotonic()
    for max_batch, wait_ms in settings:
        proc, sock = benchlib.start_daemon(work, *daemon_flags(max_batch, wait_ms, spare_batches))
        with proc:
            for load in LOADS:
                rate = load * REFERENCE_CAPACITY
                measured = summary(benchlib.run_stress(sock, *stress_flags(round(rate), POINT_S)))
                model = predict(COST, max_batch, wait_ms, rate, spare_batches)
                points.append({"max_batch": max_batch, "max_wait_ms": wait_ms, "spare_batches": spare_batches,
                               "load": load, "rate": rate,
                               "measured": measured,
                               "model": model_entry(model)})
        print(f"sweep: max-batch {max_batch:3} max-wait {wait_ms:3} ms spare {spare_batches} done "
              f"({time.monotonic() - started:5.0f} s): p99 ms by load "
              + " ".join(f"{p['measured']['p99_us'] / 1e3:.1f}" for p in points[-len(LOADS):]))
    return points


def main():
    parts = sys.argv[1:] or ["gain", "grid", "spare0"]
    work = Path(tempfile.mkdtemp(prefix="batchd-sweep-"))
    try:
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
