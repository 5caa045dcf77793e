#!/usr/bin/python3
"""A peer costs only itself (issue 33), each case against a baseline in the same run:
  slow_worker  batchd --backend workers with one batchd-worker (cpu) and one Python worker whose
               model takes 200 ms a batch: batchd-stress at 3,000/s beside it against the good
               worker alone (bar: p99 within 2x, 0 timeouts, 0 errors); the slow worker still runs
               probes. Then its share once it is fast again (a flag file it reads: 1 ms a batch),
               beside a Python worker of 1 ms a batch (an equal, which the cpu worker is not: its
               batches take microseconds, so routing by expected finish rightly leaves a 1 ms
               worker idle): how many seconds until it runs a quarter of the batches (bar: 10 s).
  class_floor  a client of the daemon's own user (granted high) keeps its ring full of 64 KiB
               inputs at high; a light normal client at 200/s beside it, with the default floors
               and with strict priority (--normal-floor-percent 0) (bar: 0 errors, 0 timeouts,
               p99 under 100 ms).
  langid       examples/langid's worker behind batchd-http, 64 connections (closed loop), with
               default flags against --fair-slice-us 0 in the same run (bar: >= 95 %); then the
               langid client at a paced rate alone and beside a second tenant (another user,
               root only) flooding over shared memory (bar: p99 within 2x of alone).
  tenant_flood a light client at 200/s (cpu backend) alone and beside another user's open-loop flood
               of 64 KiB inputs (its load tool at nice 19), with the fairness cut on and off: what
               a request arriving while another tenant's batches hold the lanes waits.
Writes bench/results/fairness.json.
Usage: fairness.py [CASE...]   Environment: FAIRNESS_S (seconds per measured run, default 10)."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import hostile  # noqa: E402
import workers as workers_bench  # noqa: E402

RUN_S = float(os.environ.get("FAIRNESS_S", "10"))
OTHER_UID = 65534
VENV_PYTHON = workers_bench.VENV_PYTHON

# A Python worker whose model takes 200 ms a batch unless the flag file exists (then 1 ms): a
# model that got slow, and recovers.
SLOW_WORKER = """
import hashlib, os, sys, time
import batchd
flag = sys.argv[2]
def model(texts):
    time.sleep(0.001 if os.path.exists(flag) else 0.2)
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]
batchd.Worker(sys.argv[1], name="slow", version="1", concurrency=2).serve(model)
"""


def paced(sock: Path, rate: int, seconds: float, *flags) -> dict:
    return benchlib.run_stress(sock, "--rate", str(rate), "--duration", str(seconds), *flags,
                               timeout_s=seconds + 120)


def light_figures(run: dict) -> dict:
    return {k: run[k] for k in ("sent", "ok", "errors", "wrong", "p50_us", "p99_us", "max_us")} | {
        "timeouts": run["errors_by_kind"]["timeout"], "overloaded": run["errors_by_kind"]["overloaded"]}


def slow_worker(work: Path) -> dict:
    flag = work / "fast"
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", "--device-timeout-ms", "1000")
    good = workers_bench.worker_process(sock, "--backend", "cpu", name="good")
    with proc, good:
        workers_bench.await_workers(sock, 1)
        alone = paced(sock, 3000, RUN_S)
        slow = benchlib.Process([str(VENV_PYTHON), "-c", SLOW_WORKER, str(sock), str(flag)], "slow worker",
                                env=workers_bench.python_env())
        with slow:
            workers_bench.await_workers(sock, 2)
            paced(sock, 3000, 2)  # its first batch measures it
            places = {d["worker"]["name"]: i for i, d in enumerate(workers_bench.status(sock)["devices"]) if d["worker"]}
            before = workers_bench.status(sock)["devices"][places["slow"]]
            beside = paced(sock, 3000, RUN_S)
            after = workers_bench.status(sock)["devices"][places["slow"]]
    recovered_s, shares = recovery(work)
    out = {
        "alone": light_figures(alone), "beside": light_figures(beside),
        "p99_ratio": beside["p99_us"] / alone["p99_us"],
        "slow_batches": after["batches_ok"] - before["batches_ok"], "slow_probes": after["probes"] - before["probes"],
        "recovered_s": recovered_s, "shares_after_flag": shares,
    }
    print(f"slow worker: p99 alone {alone['p99_us'] / 1000:.2f} ms, beside it {beside['p99_us'] / 1000:.2f} ms "
          f"({out['p99_ratio']:.2f}x); timeouts {beside['errors_by_kind']['timeout']}, errors {beside['errors']}; "
          f"it ran {out['slow_batches']} batches and {out['slow_probes']} probes; fast again: its share "
          f"back after {recovered_s} s ({', '.join(f'{s:.0%}' for s in shares)})", flush=True)
    return out


def recovery(work: Path) -> tuple:
    """The slow worker beside an equal one (1 ms a batch); the flag turns it fast: the seconds
    until it runs a quarter of the batches, and its share each second."""
    flag = work / "fast-2"
    proc, sock = benchlib.start_daemon(work, "--backend", "workers", "--device-timeout-ms", "1000")
    # The same model whose flag always exists ("/"): 1 ms a batch from the start.
    equal = benchlib.Process([str(VENV_PYTHON), "-c", SLOW_WORKER.replace('name="slow"', 'name="equal"'), str(sock),
                              "/"], "equal worker", env=workers_bench.python_env())
    slow = benchlib.Process([str(VENV_PYTHON), "-c", SLOW_WORKER, str(sock), str(flag)], "slow worker",
                            env=workers_bench.python_env())
    with proc, equal, slow:
        workers_bench.await_workers(sock, 2)
        paced(sock, 3000, 3)  # measured: the slow one is a laggard now
        places = {d["worker"]["name"]: i for i, d in enumerate(workers_bench.status(sock)["devices"]) if d["worker"]}
        flag.touch()
        load = subprocess.Popen([benchlib.binary("tools/batchd-stress"), "--socket", str(sock), "--rate", "3000",
                                 "--duration", "15", "--json", "--quiet"], stdout=subprocess.PIPE, text=True)
        recovered_s, shares = None, []
        last = workers_bench.status(sock)["devices"]
        flagged = time.monotonic()
        for _ in range(14):
            time.sleep(1)
            now = workers_bench.status(sock)["devices"]
            ran = [n["batches_ok"] - b["batches_ok"] for n, b in zip(now, last)]
            share = ran[places["slow"]] / max(sum(ran), 1)
            shares.append(share)
            if recovered_s is None and share >= 0.25:
                recovered_s = time.monotonic() - flagged
            last = now
        load.communicate(timeout=120)
    return recovered_s, shares


def class_floor(work: Path) -> dict:
    large = work / "large-inputs.txt"
    with open(large, "w") as f:
        for i in range(64):
            f.write(f"{i}-".ljust(65536, chr(ord("a") + i % 26)) + "\n")
    out = {}
    for label, flags in (("floors", []), ("strict", ["--normal-floor-percent", "0"])):
        proc, sock = benchlib.start_daemon(work, "--backend", "cpu", *flags)
        with proc:
            alone = paced(sock, 200, RUN_S / 2)
            flood = subprocess.Popen([benchlib.binary("tools/batchd-stress"), "--socket", str(sock), "--rate", "20000",
                                      "--input-file", str(large), "--priority", "high", "--duration",
                                      str(RUN_S + 2), "--timeout-ms", "5000", "--json", "--quiet"],
                                     stdout=subprocess.PIPE, text=True)
            time.sleep(1)
            beside = paced(sock, 200, RUN_S)
            flood_summary = benchlib.last_json_line(flood.communicate(timeout=120)[0], "high flood")
        out[label] = {"alone": light_figures(alone), "beside": light_figures(beside),
                      "flood": {k: flood_summary[k] for k in ("sent", "ok", "errors")}}
        print(f"class floor ({label}): light normal client beside a granted high flood of 64 KiB inputs: p99 "
              f"{beside['p99_us'] / 1000:.1f} ms (alone {alone['p99_us'] / 1000:.2f} ms), errors {beside['errors']} "
              f"(timeouts {beside['errors_by_kind']['timeout']}, overloaded "
              f"{beside['errors_by_kind']['overloaded']}); flood answered {flood_summary['ok']}", flush=True)
    return out


def langid_run(sock: Path, port: int, inputs: Path, *flags) -> dict:
    args = [benchlib.binary("tools/batchd-stress"), "--http", f"http://127.0.0.1:{port}", "--input-file", str(inputs),
            "--json", "--quiet", *flags]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    return benchlib.last_json_line(done.stdout, "batchd-stress --http (langid)")


def second_tenant(work: Path, sock: Path, port: int, inputs: Path) -> dict:
    """The langid client at a paced 2,000/s over HTTP alone, then beside another user's flood over
    shared memory (4 threads, closed loop, the same texts)."""
    os.chmod(work, 0o711)
    paced_http = ["--rate", "2000", "--duration", str(RUN_S), "--connections", "16"]
    alone = langid_run(sock, port, inputs, *paced_http)
    flood = subprocess.Popen([benchlib.binary("tools/batchd-stress"), "--socket", str(sock), "--threads", "4",
                              "--input-file", str(inputs), "--duration", str(RUN_S + 2), "--json", "--quiet"],
                             stdout=subprocess.PIPE, text=True, user=OTHER_UID, group=OTHER_UID)
    time.sleep(1)
    beside = langid_run(sock, port, inputs, *paced_http)
    flood_summary = benchlib.last_json_line(flood.communicate(timeout=120)[0], "second tenant")
    return {"alone": light_figures(alone), "beside": light_figures(beside),
            "flood_rps": flood_summary["ok"] / flood_summary["duration_s"],
            "p99_ratio": beside["p99_us"] / alone["p99_us"]}


def langid(work: Path) -> dict:
    example = benchlib.ROOT / "examples" / "langid"
    inputs = work / "langid.jsonl"
    subprocess.run([str(VENV_PYTHON), "-c", workers_bench.LANGID_IN_PROCESS, str(example), "20000", str(inputs)],
                   capture_output=True, text=True, env=workers_bench.python_env(), timeout=600, check=True)
    os.chmod(inputs, 0o644)
    out = {"throughput": {}, "second_tenant": {}}
    closed = ["--threads", "64", "--duration", str(RUN_S)]
    for label, flags in (("default", []), ("fair_slice_off", ["--fair-slice-us", "0"]), ("default_again", [])):
        proc, sock = benchlib.start_daemon(work, "--backend", "workers", "--allow-uid", str(OTHER_UID), *flags)
        port = benchlib.free_port()
        worker = benchlib.Process([str(VENV_PYTHON), str(example / "worker.py"), "--socket", str(sock)], "langid",
                                  env=workers_bench.python_env())
        http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}",
                                 "--socket", str(sock), "--log-level", "warn"], "http")
        with proc, worker, http:
            workers_bench.await_workers(sock, 1)
            workers_bench.wait_ready(port)
            run = langid_run(sock, port, inputs, *closed)
            out["throughput"][label] = {"rps": run["ok"] / run["duration_s"], "errors": run["errors"],
                                        "wrong": run["wrong"]}
            print(f"langid over HTTP, 64 connections, {label}: {out['throughput'][label]['rps']:.0f}/s", flush=True)
            if label != "default_again" and os.geteuid() == 0:
                out["second_tenant"][label] = second_tenant(work, sock, port, inputs)
                st = out["second_tenant"][label]
                print(f"langid at 2,000/s over HTTP ({label}): p99 alone {st['alone']['p99_us'] / 1000:.2f} ms, "
                      f"beside a second tenant's flood ({st['flood_rps']:.0f}/s) {st['beside']['p99_us'] / 1000:.2f} "
                      f"ms ({st['p99_ratio']:.2f}x); errors {st['beside']['errors']}", flush=True)
    t = out["throughput"]
    out["default_over_off"] = (t["default"]["rps"] + t["default_again"]["rps"]) / 2 / t["fair_slice_off"]["rps"]
    print(f"langid: default flags / fair slice off = {out['default_over_off']:.2f}", flush=True)
    return out


def tenant_flood(work: Path) -> dict:
    hostile.write_large_inputs(work)
    out = {}
    for label, flags in (("cut", []), ("cut_off", ["--fair-slice-us", "0"])):
        proc, sock = benchlib.start_daemon(work, "--backend", "cpu", "--allow-uid", str(OTHER_UID), *flags)
        with proc:
            alone = paced(sock, 200, RUN_S, "--timeout-ms", "10000")
            flood = subprocess.Popen(["nice", "-n", "19", benchlib.binary("tools/batchd-stress"), "--socket", str(sock),
                                      "--rate", "40000", "--input-file", str(work / "large-inputs.txt"),
                                      "--duration", str(RUN_S + 2), "--timeout-ms", "10000", "--json", "--quiet"],
                                     stdout=subprocess.PIPE, text=True, user=OTHER_UID, group=OTHER_UID)
            time.sleep(1)
            beside = paced(sock, 200, RUN_S, "--timeout-ms", "10000")
            flood_summary = benchlib.last_json_line(flood.communicate(timeout=120)[0], "tenant flood")
        out[label] = {"alone": light_figures(alone), "beside": light_figures(beside),
                      "flood_rps": flood_summary["ok"] / flood_summary["duration_s"]}
        print(f"tenant flood ({label}): light p50 {beside['p50_us'] / 1000:.2f} ms, p99 {beside['p99_us'] / 1000:.2f} "
              f"ms beside (alone {alone['p99_us'] / 1000:.2f} ms), errors {beside['errors']}", flush=True)
    return out


CASES = {"slow_worker": slow_worker, "class_floor": class_floor, "langid": langid, "tenant_flood": tenant_flood}


def main():
    chosen = sys.argv[1:] or list(CASES)
    results = {"run_s": RUN_S, "build": benchlib.build_dir().name}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o711)  # the second tenant (another user) reaches the sockets and inputs
        for name in chosen:
            work = Path(tmp) / name
            work.mkdir()
            results[name] = CASES[name](work)
    benchlib.write_result("fairness.json", results)


if __name__ == "__main__":
    main()
