#!/usr/bin/python3
"""Many models in one daemon (docs/MODELS.md), in one run:
  many     the cost of many models: the highest shared-memory open-loop rate held (0 errors, 0 wrong)
           by one daemon serving batchstring alone against one serving eight cpu models, the load
           spread evenly over the eight (batchd-stress --model, each in turn); turns alternate
  isolate  a flood on model A (open loop far past what it can run, the client's every slot in
           flight) beside a light client of model B at 200 req/s: B's p99, errors and timeouts
           against B alone; on the sim backend (both models on the same simulated devices, where
           they take turns, so the cores are not the limit) and on the cpu backend; and what A's
           flood is answered alone and beside B
Writes bench/results/models.json. Environment: BATCHD_BENCH_BUILD (default build-release),
MODELS_TURNS (2), MODELS_RATES (the ladder), MODELS_STEP_S (seconds a rate)."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

TURNS = int(os.environ.get("MODELS_TURNS", "2"))
RATES = [int(r) for r in os.environ.get(
    "MODELS_RATES", "200000,300000,400000,500000,600000,700000,800000,900000,1000000,1100000,1200000").split(",")]
STEP_S = float(os.environ.get("MODELS_STEP_S", "3"))
CPU_FLAGS = ["--backend", "cpu", "--cost", "1", "--slots-per-client", "16384", "--max-input-bytes", "1024",
             "--max-output-bytes", "256"]
EIGHT = ["batchstring"] + [f"m{i}" for i in range(1, 8)]


def ladder(sock: Path, label: str, *flags) -> int:
    """The highest rate held, climbing. A rung not held is run once more before the ladder stops:
    on this shared VM one stall of the load generator's core (a few ms) refuses a burst at any
    rate, and ends a ladder far below what the daemon holds; both arms are treated alike."""
    best = 0
    for rate in RATES:
        for attempt in (1, 2):
            run = benchlib.open_loop_step(sock, rate, STEP_S, *flags)
            print(f"models: {label:>12} offered {rate:7d}/s answered {run['ok'] / run['duration_s']:9.0f}/s errors "
                  f"{run['errors']} wrong {run['wrong']} p99 {run['p99_us']:9.1f} us "
                  f"{'held' if run['held'] else 'NOT held'}{' (again)' if attempt == 2 else ''}", flush=True)
            if run["wrong"]:
                raise SystemExit(f"models: {label}: {run['wrong']} wrong answers at {rate}/s")
            if run["held"]:
                break
        if not run["held"]:
            break
        best = rate
    return best


def many(work: Path) -> dict:
    model_flags = [a for m in EIGHT[1:] for a in ("--model", m)]
    stress_flags = [a for m in EIGHT for a in ("--model", m)]
    runs = {"one": [], "eight": []}
    for _ in range(TURNS):
        proc, sock = benchlib.start_daemon(work, *CPU_FLAGS)
        with proc:
            runs["one"].append(ladder(sock, "one model"))
        proc, sock = benchlib.start_daemon(work, *CPU_FLAGS, *model_flags)
        with proc:
            runs["eight"].append(ladder(sock, "eight models", *stress_flags))
    med = {k: statistics.median(v) for k, v in runs.items()}
    ratio = med["eight"] / med["one"] if med["one"] else 0.0
    print(f"models: highest held, one model {med['one']}/s, eight models {med['eight']}/s: {ratio:.3f}", flush=True)
    return {"rates": RATES, "step_s": STEP_S, "held": runs, "median_held": med, "eight_over_one": ratio}


def light_client(sock: Path, model: str, check: list) -> dict:
    return benchlib.run_stress(sock, "--model", model, "--rate", "200", "--duration", "6", "--warmup", "1",
                               "--timeout-ms", "5000", *check, timeout_s=120)


def start_flood(sock: Path, rate: int, check: list, duration_s: int) -> subprocess.Popen:
    """Model A's flood: open loop far past what it can run, with a deadline long enough that its
    client's slots fill and stay full (its refusals are "overloaded", counted, not waited for)."""
    args = [benchlib.binary("tools/batchd-stress"), "--socket", str(sock), "--json", "--quiet",
            "--rate", str(rate), "--duration", str(duration_s), "--timeout-ms", "60000", *check]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def flood_result(flood: subprocess.Popen) -> dict:
    out, err = flood.communicate(timeout=180)
    return benchlib.last_json_line(out + "\n" + err, "the flood")


def isolation(work: Path, label: str, flags: list, flood_rate: int, check: list) -> dict:
    """`check`: batchd-stress's flags that say what the backend answers."""
    proc, sock = benchlib.start_daemon(work, *flags, "--model", "b")
    with proc:
        alone = light_client(sock, "b", check)
        # What A's flood is answered alone, every device its own: the price of the device B keeps.
        a_alone = flood_result(start_flood(sock, flood_rate, check, 6))
        flood = start_flood(sock, flood_rate, check, 10)
        threading.Event().wait(1.0)  # the flood's slots fill first
        beside = light_client(sock, "b", check)
        flood_summary = flood_result(flood)
    ratio = beside["p99_us"] / alone["p99_us"] if alone["p99_us"] else 0.0
    a_rate_alone = a_alone["ok"] / 6
    a_rate_beside = flood_summary["ok"] / 10
    print(f"models: {label}: model B alone p99 {alone['p99_us']:.0f} us; beside A's flood p99 {beside['p99_us']:.0f} us "
          f"({ratio:.2f}x), errors {beside['errors']} (timeouts {beside['errors_by_kind'].get('timeout', 0)}); "
          f"the flood: sent {flood_summary['sent']}, ok {flood_summary['ok']}, errors {flood_summary['errors']}; "
          f"A answered {a_rate_alone:.0f}/s alone, {a_rate_beside:.0f}/s beside B", flush=True)
    keep = ("sent", "ok", "errors", "wrong", "errors_by_kind", "p50_us", "p99_us", "max_us")
    return {"flags": flags, "flood_rate": flood_rate, "b_alone": {k: alone[k] for k in keep},
            "b_beside_flood": {k: beside[k] for k in keep}, "flood": {k: flood_summary[k] for k in keep},
            "a_alone": {k: a_alone[k] for k in keep}, "a_answered_per_s_alone": a_rate_alone,
            "a_answered_per_s_beside": a_rate_beside, "p99_ratio": ratio}


def main():
    steps = sys.argv[1:] or ["many", "isolate"]
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "many" in steps:
            result["many"] = many(work)
        if "isolate" in steps:
            # Model A's capacity: 2 devices at 200 us an input, about 10,000/s; the flood offers 5 times that.
            sim = ["--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "2000", "--sim-per-item-us", "200"]
            result["isolate_sim"] = isolation(work, "sim", sim, 50000, ["--expect-sim", "1"])
            result["isolate_cpu"] = isolation(work, "cpu", ["--backend", "cpu", "--cpu-threads", "1"], 400000, [])
    if set(steps) != {"many", "isolate"}:  # a step run alone keeps the other's last results
        kept = benchlib.RESULTS / "models.json"
        if kept.exists():
            last = json.loads(kept.read_text())
            result = {**{k: v for k, v in last.items() if k != "machine"}, **result}
    benchlib.write_result("models.json", result)


if __name__ == "__main__":
    main()
