#!/usr/bin/python3
"""The adaptive policy against fixed wait-or-full settings on load shapes that change: bursts above
the ceiling with gaps (three heights and lengths), steps up and down, a slow ramp, a diurnal-like
swing. Sim backend at a GPU-like cost (2 ms per batch + 20 us per request, 2 devices; the same as
bench/sweep.py), open loop (batchd-stress --shape, latency from each request's intended send
time, every answer checked, 1 s deadlines). Per shape: the default policy and every fixed
(max-batch, max-wait) of the grid, each run three times in its own daemon; the median of the three
p99s is what is compared. Writes bench/results/shapes.json.
Usage: shapes.py            (everything: about 25 minutes)
Environment: SHAPES_ONLY=name,... (some shapes), SHAPES_POLICIES=adaptive,128:5,... (some policies),
SHAPES_RUNS (runs per point, default 3), SHAPES_S (measured seconds per run, default 4)."""

import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from sweep import COST, REFERENCE_CAPACITY, TIMEOUT_MS, sim_flags  # noqa: E402

RUNS = int(os.environ.get("SHAPES_RUNS", "3"))
MEASURE_S = float(os.environ.get("SHAPES_S", "4"))
WARMUP_S = 1.0
COOLDOWN_S = 0.3
BATCHES = [32, 64, 128, 256]
WAITS_MS = [1, 2, 5, 10]
C = REFERENCE_CAPACITY  # what batches of 64 carry: about 39,000 requests/s


def diurnal(low: float, high: float, period_s: float, pieces: int = 16) -> list:
    """A sine swing between low and high fractions of C, as linear pieces."""
    def at(i):
        return C * (low + (high - low) * (1 - math.cos(2 * math.pi * i / pieces)) / 2)
    return [(at(i), at(i + 1), period_s / pieces) for i in range(pieces)]


# name -> (what it is, one cycle of (from, to, seconds) segments in requests/s; it repeats).
SHAPES = {
    "burst_1.5x_20ms": ("20 ms at 1.5x the ceiling every 100 ms, silent between", [(1.5 * C, 1.5 * C, 0.02),
                                                                                   (0, 0, 0.08)]),
    "burst_2x_10ms": ("10 ms at 2x the ceiling every 100 ms, silent between", [(2 * C, 2 * C, 0.01),
                                                                               (0, 0, 0.09)]),
    "burst_1.25x_50ms": ("50 ms at 1.25x the ceiling every 200 ms, 10 % between",
                         [(1.25 * C, 1.25 * C, 0.05), (0.1 * C, 0.1 * C, 0.15)]),
    "steps": ("10 % and 90 % of the ceiling, 1 s each", [(0.1 * C, 0.1 * C, 1.0), (0.9 * C, 0.9 * C, 1.0)]),
    "ramp": ("5 % to 100 % of the ceiling and back over 4 s", [(0.05 * C, 1.0 * C, 2.0), (1.0 * C, 0.05 * C, 2.0)]),
    "diurnal": ("a sine swing between 5 % and 95 % of the ceiling, 2 s a period", diurnal(0.05, 0.95, 2.0)),
}


def shape_flag(segments) -> str:
    return ",".join(f"{a:.0f}:{s:g}" if round(a) == round(b) else f"{a:.0f}..{b:.0f}:{s:g}" for a, b, s in segments)


def policy_flags(policy: str) -> list:
    if policy == "adaptive":
        return sim_flags()
    max_batch, max_wait = policy.split(":")
    return sim_flags() + ["--policy", "fixed", "--max-batch", max_batch, "--max-wait-ms", max_wait]


def keep(run: dict) -> dict:
    return {k: run[k] for k in ("sent", "ok", "errors", "wrong", "errors_by_kind", "rps", "p50_us", "p99_us",
                                "p999_us", "max_us")}


def measure(work: Path, policy: str, segments) -> dict:
    proc, sock = benchlib.start_daemon(work, *policy_flags(policy))
    with proc:
        run = benchlib.run_stress(sock, "--expect-sim", "1", "--input-bytes", "16:64", "--timeout-ms",
                                  str(TIMEOUT_MS), "--shape", shape_flag(segments), "--duration", str(MEASURE_S),
                                  "--warmup", str(WARMUP_S), "--cooldown", str(COOLDOWN_S),
                                  timeout_s=MEASURE_S + 120)
    return keep(run)


def main():
    only = [s for s in os.environ.get("SHAPES_ONLY", "").split(",") if s]
    policies = [p for p in os.environ.get("SHAPES_POLICIES", "").split(",") if p] or \
        ["adaptive"] + [f"{b}:{w}" for b in BATCHES for w in WAITS_MS]
    work = Path(tempfile.mkdtemp(prefix="batchd-shapes-"))
    out = {"cost": COST.__dict__, "capacity": C, "timeout_ms": TIMEOUT_MS, "runs_per_point": RUNS,
           "measure_s": MEASURE_S, "warmup_s": WARMUP_S, "shapes": {}}
    try:
        for name, (what, segments) in SHAPES.items():
            if only and name not in only:
                continue
            points = {}
            # Runs interleave the policies, so a slow spell of the machine falls on all of them.
            for _ in range(RUNS):
                for policy in policies:
                    points.setdefault(policy, []).append(measure(work, policy, segments))
            table = {}
            for policy, runs in points.items():
                table[policy] = {"runs": runs, "p99_us": statistics.median(r["p99_us"] for r in runs),
                                 "p50_us": statistics.median(r["p50_us"] for r in runs),
                                 "errors": sum(r["errors"] + r["wrong"] for r in runs)}
            fixed = {p: v for p, v in table.items() if p != "adaptive" and v["errors"] == 0}
            best = min(fixed, key=lambda p: fixed[p]["p99_us"]) if fixed else None
            out["shapes"][name] = {"what": what, "shape": shape_flag(segments),
                                   "mean_rate": sum((a + b) / 2 * s for a, b, s in segments) / sum(s for _, _, s in segments),
                                   "policies": table, "best_fixed": best}
            line = " ".join(f"{p} {v['p99_us'] / 1e3:.2f}" + (f" ({v['errors']} errors)" if v["errors"] else "")
                            for p, v in table.items())
            print(f"shapes: {name}: p99 ms (median of {RUNS}): {line}; best fixed {best}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not only and not os.environ.get("SHAPES_POLICIES"):
        benchlib.write_result("shapes.json", out)
    elif os.environ.get("SHAPES_POLICIES") == "adaptive" and os.environ.get("SHAPES_MERGE"):
        # The adaptive rows alone, again, into the last full run's file (the fixed grid does not
        # change with the policy): the file records when and at which commit each was measured.
        path = benchlib.RESULTS / "shapes.json"
        full = json.loads(path.read_text())
        for name, s in out["shapes"].items():
            full["shapes"][name]["policies"]["adaptive"] = s["policies"]["adaptive"]
        full["adaptive_remeasured"] = benchlib.machine()
        path.write_text(json.dumps(full, indent=1) + "\n")
        print(f"bench: merged the adaptive rows into {path}")


if __name__ == "__main__":
    main()
