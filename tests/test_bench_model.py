#!/usr/bin/env python3
"""The benchmark's analytic model (bench/model.py): its capacity, its three regimes and the
direction of its trade-offs, checked against hand-computed values."""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from model import CostModel, predict  # noqa: E402

COST = CostModel(fixed_us=2000, per_item_us=20, devices=2)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


# capacity = D * B / t(B)
check(round(COST.capacity(1)) == 990, f"capacity(1) = {COST.capacity(1)}")
check(round(COST.capacity(64)) == 39024, f"capacity(64) = {COST.capacity(64)}")

# Past capacity: overloaded.
p = predict(COST, 8, 5, 10000)
check(not p.stable and p.mode == "overloaded" and math.isinf(p.p99_ms), f"B=8 at 10k/s: {p}")

# max-wait 0 at 10% of 39k/s: backlog mode, batches of n_busy = lambda F / (D - lambda c).
rate = 3902.0
n_busy = rate * 0.002 / (2 - rate * 20e-6)
p = predict(COST, 64, 0, rate)
check(p.mode == "backlog" and abs(p.batch - n_busy) < 1e-9, f"W=0: {p}")
check(abs(p.p99_ms - 2.5 * (2 + 0.02 * n_busy)) < 1e-6, f"W=0 p99: {p}")

# A long wait at low load: the timer closes batches; the first request waits about the fill time.
p = predict(COST, 64, 50, rate)
fill_ms = 63 / rate * 1e3
check(p.mode == "timer" and p.batch == 64, f"W=50: {p}")
check(fill_ms + 3.28 <= p.p99_ms <= fill_ms + 3.28 * 2.5, f"W=50 p99 {p.p99_ms} vs fill {fill_ms}")

# Longer waits cost latency at low load; a short wait beats both extremes.
p1, p50 = predict(COST, 64, 1, rate), predict(COST, 64, 50, rate)
check(p1.p99_ms < p50.p99_ms and p1.p99_ms < predict(COST, 64, 0, rate).p99_ms, "short wait not best at 10%")

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("bench model: ok")
