#!/usr/bin/python3
"""Worker processes (docs/WORKERS.md), each figure against a baseline from the same run:

1. open loop over shared memory at rising rates, highest rate held with 0 errors and 0 wrong:
   the cpu backend in the daemon, against batchd-worker --backend cpu (the same reference
   batchstring, out of process), with the same threads; each batch's hand-off to the worker and
   back (the daemon's histogram) at a fixed rate and at the highest held;
2. a Python worker with hashlib.sha256: highest rate held, and its overhead per batch (the lane's
   batch time with a model that returns its inputs, against batchd-worker's);
3. examples/langid: the batched scoring against py3langid one text at a time in one process, and
   batchd-http + daemon + the worker at 64 connections against the batched scoring alone;
4. chaos: 10,000 requests/s (half over shared memory, half over HTTP) for 60 s with 3 workers
   while one is killed every 2 s and restarted (and one is stopped for 5 s), then the same load
   through a rolling replacement of all three;
5. the daemon's memory and descriptors before and after 1,000 worker attach/kill cycles.
Writes bench/results/workers.json."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

ROOT = benchlib.ROOT
STEP_S = float(os.environ.get("WORKERS_STEP_S", "5"))
CPU_RATES = [int(r) for r in os.environ.get(
    "WORKERS_CPU_RATES", "100000,200000,300000,400000,500000,600000,700000,800000,1000000,1200000").split(",")]
PY_RATES = [int(r) for r in os.environ.get(
    "WORKERS_PY_RATES", "100000,150000,200000,250000,300000,350000,400000,500000").split(",")]
CHAOS_S = float(os.environ.get("WORKERS_CHAOS_S", "60"))
LANGID_HTTP_RATES = [int(r) for r in os.environ.get("WORKERS_LANGID_RATES", "20000,30000,40000,50000,60000,70000").split(",")]
CYCLES = int(os.environ.get("WORKERS_CYCLES", "1000"))
# As bench/openloop.py: room for a VM's stalls at high rates, small slots for small inputs.
DAEMON_FLAGS = ["--slots-per-client", "16384", "--max-input-bytes", "1024", "--max-output-bytes", "256"]
THREADS = str(os.cpu_count() or 2)
VENV_PYTHON = ROOT / ".venv" / "bin" / "python3"


def python_env() -> dict:
    env = os.environ.copy()
    env["PYTHONPATH"] = str(benchlib.build_dir() / "python" / "src")
    return env


def ladder(sock: Path, rates: list, label: str, *flags) -> dict:
    """Rates in turn until one is not held; the runs and the highest held."""
    runs = []
    for rate in rates:
        run = benchlib.open_loop_step(sock, rate, STEP_S, *flags)
        runs.append(run)
        print(f"workers: {label:>10} offered {rate:8d}/s answered {run['ok'] / run['duration_s']:9.0f}/s "
              f"errors {run['errors']} wrong {run['wrong']} p99 {run['p99_us']:9.1f} us "
              f"{'held' if run['held'] else 'NOT held'}")
        if not run["held"]:
            break
    return {"runs": runs, "highest_held": max((r["rate"] for r in runs if r["held"]), default=0)}


def status(sock: Path) -> dict:
    out = subprocess.run([benchlib.binary("tools/batchctl"), "--socket", str(sock), "--json"], capture_output=True,
                         text=True, timeout=30)
    return json.loads(out.stdout)


def await_workers(sock: Path, n: int, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while status(sock)["workers"] != n:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {n} worker(s) did not attach")
        time.sleep(0.05)


def handoff(sock: Path) -> dict:
    """Every attached worker's hand-off histogram, summed: count, mean and p50/p99 bucket bounds."""
    s = status(sock)
    bounds = s["latency_bounds_ns"]
    counts = [0] * (len(bounds) + 1)
    total_ns = 0
    for device in s["devices"]:
        if device.get("worker"):
            for b, n in enumerate(device["worker"]["handoff"]["buckets"]):
                counts[b] += n
            total_ns += device["worker"]["handoff"]["sum_ns"]
    count = sum(counts)

    def quantile_bound(q):
        seen = 0
        for b, n in enumerate(counts):
            seen += n
            if count and seen >= q * count:
                return bounds[b] / 1000 if b < len(bounds) else float("inf")
        return None

    return {"batches": count, "mean_us": total_ns / count / 1000 if count else None,
            "p50_le_us": quantile_bound(0.5), "p99_le_us": quantile_bound(0.99),
            "within_10us": counts[0] / count if count else None}


def worker_process(sock: Path, *args, python=None, name="bench") -> benchlib.Process:
    if python:
        return benchlib.Process([str(VENV_PYTHON), "-c", python, str(sock)], name, env=python_env())
    return benchlib.Process([benchlib.binary("tools/batchd-worker"), "--socket", str(sock), "--log-level", "warn",
                             *args], name)


SHA_WORKER = """
import hashlib, sys, batchd
batchd.Worker(sys.argv[1], name="python-sha256", concurrency=%d).serve(
    lambda texts: [hashlib.sha256(t.encode()).hexdigest() for t in texts])
"""
# A model that costs nothing and answers as the sim backend does (the input's code points reversed),
# so that batchd-stress --expect-sim 1 checks it: what is left of a batch's time is the worker's.
REVERSE_WORKER = """
import sys, batchd
batchd.Worker(sys.argv[1], name="python-reverse").serve(lambda texts: [t[::-1] for t in texts])
"""
def in_process_vs_worker(work: Path) -> dict:
    out = {}
    with benchlib.start_daemon(work, "--backend", "cpu", "--cpu-threads", THREADS, *DAEMON_FLAGS)[0]:
        out["in_process"] = ladder(work / "batchd.sock", CPU_RATES, "cpu")
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", *DAEMON_FLAGS)
    with proc, worker_process(sock, "--backend", "cpu", "--concurrency", "1"):
        await_workers(sock, 1)
        # Latency-bound: one client thread, one request at a time, one lane, so the hand-off is
        # not queued behind other work on the 2 cores and each side finds the other spinning.
        out["closed_loop_1"] = benchlib.run_stress(sock, "--threads", "1", "--duration", str(STEP_S),
                                                   "--input-bytes", "16:256")
        out["handoff_closed_loop_1"] = handoff(sock)
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", *DAEMON_FLAGS)
    with proc, worker_process(sock, "--backend", "cpu", "--concurrency", THREADS):
        await_workers(sock, 1)
        benchlib.run_stress(sock, "--rate", "100000", "--duration", str(STEP_S), "--warmup", "1",
                            "--input-bytes", "16:256")
        out["handoff_at_100k"] = handoff(sock)
        out["worker"] = ladder(sock, CPU_RATES, "worker")
        out["handoff_overall"] = handoff(sock)
    out["ratio"] = out["worker"]["highest_held"] / max(out["in_process"]["highest_held"], 1)
    print(f"workers: worker / in-process highest held: {out['ratio']:.2f}; hand-off, one request at a time: "
          f"{out['handoff_closed_loop_1']}; at 100k/s: {out['handoff_at_100k']}")
    return out


def python_worker(work: Path) -> dict:
    out = {}
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", *DAEMON_FLAGS)
    with proc, worker_process(sock, python=SHA_WORKER % 1, name="py-sha"):
        await_workers(sock, 1)
        out["sha256"] = ladder(sock, PY_RATES, "python")
    # Overhead per batch: a model that costs nothing, in Python and in batchd-worker (the sim
    # backend at zero cost), one request at a time (batches of one): the difference in the p50
    # round trip is what the Python layer adds (the GIL, the lists, the str conversions), per batch.
    # Single runs on this shared VM differ by tens of microseconds, so each side runs three times,
    # in turn, and the medians are compared.
    makers = (("python", lambda s: worker_process(s, python=REVERSE_WORKER, name="py-reverse")),
              ("cpp", lambda s: worker_process(s, "--backend", "sim", "--sim-fixed-us", "0",
                                               "--sim-per-item-us", "0", "--concurrency", "1")))
    trials = {"python": [], "cpp": []}
    for _ in range(3):
        for label, make in makers:
            proc, sock = benchlib.start_daemon(work, "--backend", "workers", *DAEMON_FLAGS)
            with proc, make(sock):
                await_workers(sock, 1)
                run = benchlib.run_stress(sock, "--threads", "1", "--duration", str(STEP_S), "--input-bytes",
                                          "16:256", "--expect-sim", "1")
                device = next(d for d in status(sock)["devices"] if d.get("worker"))
                trials[label].append({"batch_ns": device["batch_ns"], "handoff": handoff(sock), "run": run})
    for label, runs in trials.items():
        runs.sort(key=lambda t: t["run"]["p50_us"])
        out[f"zero_cost_{label}"] = dict(runs[1], p50_us_trials=[t["run"]["p50_us"] for t in runs])
    # What a caller sees: the median p50 round trip of a batch of one, Python's worker against C++'s.
    out["python_overhead_per_batch_us"] = out["zero_cost_python"]["run"]["p50_us"] - out["zero_cost_cpp"]["run"]["p50_us"]
    print(f"workers: python sha256 highest held {out['sha256']['highest_held']}/s; Python's overhead per batch "
          f"{out['python_overhead_per_batch_us']:.1f} us")
    return out


LANGID_IN_PROCESS = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import py3langid
from langid_batch import BatchIdentifier
from sentences import sentences
texts = sentences(int(sys.argv[2]))
py3langid.classify("warm up")
started = time.perf_counter()
expected = [py3langid.classify(t)[0] for t in texts]
one_by_one = len(texts) / (time.perf_counter() - started)
identifier = BatchIdentifier()
identifier.classify(texts[:256])
started = time.perf_counter()
got = []
for i in range(0, len(texts), 256):
    got += identifier.classify(texts[i:i + 256])
batched = len(texts) / (time.perf_counter() - started)
with open(sys.argv[3], "w") as f:
    for t, e in zip(texts, expected):
        f.write(json.dumps({"input": t, "output": e}) + "\\n")
print(json.dumps({"texts": len(texts), "one_by_one_per_s": one_by_one, "batched_per_s": batched,
                  "identical": got == expected}))
"""


def langid(work: Path) -> dict:
    example = ROOT / "examples" / "langid"
    inputs = work / "langid.jsonl"
    done = subprocess.run([str(VENV_PYTHON), "-c", LANGID_IN_PROCESS, str(example), "20000", str(inputs)],
                          capture_output=True, text=True, env=python_env(), timeout=600)
    out = {"in_process": benchlib.last_json_line(done.stdout + done.stderr, "langid in process")}
    out["batched_over_one_by_one"] = out["in_process"]["batched_per_s"] / out["in_process"]["one_by_one_per_s"]
    # Default flags: one tenant (batchd-http, its loops one user) feeds this daemon, so the fair
    # slice never cuts its batches (examples/langid/README.md).
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", *DAEMON_FLAGS)
    port = benchlib.free_port()
    worker = benchlib.Process([str(VENV_PYTHON), str(example / "worker.py"), "--socket", str(sock)], "langid",
                              env=python_env())
    http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}", "--socket",
                             str(sock), "--log-level", "warn"], "http")
    with proc, worker, http:
        await_workers(sock, 1)
        wait_ready(port)
        args = [benchlib.binary("tools/batchd-stress"), "--http", f"http://127.0.0.1:{port}", "--threads", "64",
                "--duration", str(max(STEP_S, 10)), "--input-file", str(inputs), "--json", "--quiet"]
        pids = {"worker": worker.proc.pid, "daemon": proc.proc.pid, "batchd-http": http.proc.pid}
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        load = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        stdout = load.communicate(timeout=300)[0]
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        run = benchlib.last_json_line(stdout, "batchd-stress --http (langid)")
        # Open loop on the same 64 connections, pipelined (batchd-stress's default depth): batches
        # grow past 64, where the batched scoring pays most.
        out["http_64_open"] = []
        for rate in LANGID_HTTP_RATES:
            args = [benchlib.binary("tools/batchd-stress"), "--http", f"http://127.0.0.1:{port}", "--rate", str(rate),
                    "--connections", "64", "--duration", str(STEP_S), "--warmup", "1", "--input-file", str(inputs),
                    "--json", "--quiet"]
            step = benchlib.last_json_line(subprocess.run(args, capture_output=True, text=True, timeout=300).stdout,
                                           "batchd-stress --http --rate (langid)")
            step["held"] = benchlib.held(step)
            out["http_64_open"].append(step)
            print(f"workers: langid over HTTP, 64 connections open loop {rate}/s: errors {step['errors']} wrong "
                  f"{step['wrong']} p99 {step['p99_us'] / 1000:.1f} ms {'held' if step['held'] else 'NOT held'}")
            if not step["held"]:
                break
    out["http_64"] = run
    out["cpu_s"] = cpu
    out["http_64_open_highest_held"] = max((r["rate"] for r in out["http_64_open"] if r["held"]), default=0)
    out["http_open_over_batched"] = out["http_64_open_highest_held"] / out["in_process"]["batched_per_s"]
    rate = run["ok"] / run["duration_s"]
    out["http_over_batched"] = rate / out["in_process"]["batched_per_s"]
    # The batched figure had a whole core; here the worker shares 2 cores with the load generator,
    # the front-end and the daemon: its texts per second of its own CPU, against the batched ones.
    out["worker_core_share"] = cpu["worker"] / run["duration_s"]
    out["per_worker_cpu_over_batched"] = run["ok"] / max(cpu["worker"], 1e-9) / out["in_process"]["batched_per_s"]
    print(f"workers: langid batched/one-by-one {out['batched_over_one_by_one']:.2f}; over HTTP at 64 connections "
          f"{rate:.0f}/s = {out['http_over_batched']:.2f} of batched, wrong {run['wrong']}; the worker had "
          f"{out['worker_core_share']:.2f} of a core: {out['per_worker_cpu_over_batched']:.2f} of batched per CPU second; "
          f"open loop held {out['http_64_open_highest_held']}/s = {out['http_open_over_batched']:.2f} of batched")
    return out


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(port: int, timeout_s=30.0):
    import urllib.request
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("bench: batchd-http did not become ready")


def chaos(work: Path, rolling: bool) -> dict:
    """10,000 requests/s, half over shared memory and half over HTTP, with 3 workers, while they
    are killed (or replaced); every answer checked."""
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", *DAEMON_FLAGS)
    port = benchlib.free_port()
    http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}", "--socket",
                             str(sock), "--log-level", "warn"], "http")
    workers = [worker_process(sock, "--backend", "cpu", "--version", "1", name=f"w{i}") for i in range(3)]
    events = []
    with proc, http:
        await_workers(sock, 3)
        wait_ready(port)
        common = ["--rate", "5000", "--duration", str(CHAOS_S), "--timeout-ms", "10000", "--json", "--quiet"]
        loads = [subprocess.Popen([benchlib.binary("tools/batchd-stress"), "--socket", str(sock), *common],
                                  stdout=subprocess.PIPE, text=True),
                 subprocess.Popen([benchlib.binary("tools/batchd-stress"), "--http", f"http://127.0.0.1:{port}",
                                   *common], stdout=subprocess.PIPE, text=True)]
        started = time.monotonic()
        i = 0
        stopped_once = False
        while time.monotonic() - started < CHAOS_S - 1:
            time.sleep(2 if not rolling else 5)
            victim = i % 3
            if rolling:
                fresh = worker_process(sock, "--backend", "cpu", "--version", str(2 + i // 3), name=f"w{i}")
                await_workers(sock, 4)
                workers[victim].proc.send_signal(signal.SIGTERM)
                workers[victim].proc.wait(timeout=30)
                workers[victim].stop()
                workers[victim] = fresh
                events.append((round(time.monotonic() - started, 1), f"replaced worker {victim}"))
            elif not stopped_once and time.monotonic() - started > CHAOS_S / 2:
                workers[victim].proc.send_signal(signal.SIGSTOP)
                time.sleep(5)
                workers[victim].proc.send_signal(signal.SIGCONT)
                stopped_once = True
                events.append((round(time.monotonic() - started, 1), f"stopped worker {victim} for 5 s"))
            else:
                workers[victim].proc.kill()
                workers[victim].proc.wait()
                workers[victim].stop()
                workers[victim] = worker_process(sock, "--backend", "cpu", "--version", "1", name=f"w{i}")
                events.append((round(time.monotonic() - started, 1), f"killed worker {victim}"))
            i += 1
        runs = [benchlib.last_json_line(p.communicate(timeout=CHAOS_S + 120)[0], "chaos load") for p in loads]
        for w in workers:
            w.stop()
    out = {"shm": runs[0], "http": runs[1], "events": len(events),
           "errors": runs[0]["errors"] + runs[1]["errors"], "wrong": runs[0]["wrong"] + runs[1]["wrong"]}
    print(f"workers: chaos ({'rolling' if rolling else 'kill'}): {len(events)} events, errors {out['errors']} "
          f"wrong {out['wrong']}, p99 shm {runs[0]['p99_us'] / 1000:.1f} ms http {runs[1]['p99_us'] / 1000:.1f} ms")
    return out


def daemon_footprint(pid: int) -> dict:
    rss_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
    return {"rss_kib": rss_kib, "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "worker_maps": sum("batchd-worker" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())}


def cycles(work: Path) -> dict:
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", *DAEMON_FLAGS)
    with proc:
        def one_cycle():
            worker = subprocess.Popen([benchlib.binary("tools/batchd-worker"), "--socket", str(sock), "--once"],
                                      stdout=subprocess.PIPE, text=True)
            if "attached" not in worker.stdout.readline():
                raise SystemExit("bench: batchd-worker did not attach")
            worker.kill()
            worker.wait()
            worker.stdout.close()
        for _ in range(10):  # the first attaches allocate what stays (thread stacks, pools)
            one_cycle()
        await_workers(sock, 0)
        time.sleep(0.5)
        before = daemon_footprint(proc.proc.pid)
        started = time.monotonic()
        for _ in range(CYCLES):
            one_cycle()
        await_workers(sock, 0)
        time.sleep(0.5)
        after = daemon_footprint(proc.proc.pid)
    out = {"cycles": CYCLES, "seconds": time.monotonic() - started, "before": before, "after": after}
    print(f"workers: {CYCLES} attach/kill cycles: rss {before['rss_kib']} -> {after['rss_kib']} KiB, fds "
          f"{before['fds']} -> {after['fds']}, worker mappings {after['worker_maps']}")
    return out


def main():
    only = sys.argv[1:] or ["cpu", "python", "langid", "chaos", "cycles"]
    work = Path(tempfile.mkdtemp(prefix="batchd-workers-"))
    path = benchlib.RESULTS / "workers.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    result.pop("machine", None)
    try:
        if "cpu" in only:
            result["cpu"] = in_process_vs_worker(work)
        if "python" in only:
            result["python"] = python_worker(work)
        if "langid" in only:
            result["langid"] = langid(work)
        if "chaos" in only:
            result["chaos_kill"] = chaos(work, rolling=False)
            result["chaos_rolling"] = chaos(work, rolling=True)
        if "cycles" in only:
            result["cycles"] = cycles(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["step_s"] = STEP_S
    benchlib.write_result("workers.json", result)


if __name__ == "__main__":
    main()
