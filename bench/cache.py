#!/usr/bin/env python3
"""docs/BENCHMARKS.md section 3f: the response cache (docs/CACHE.md), hits against misses in one run.

  1. one caller over shared memory (batchd-stress --threads 1, cpu backend): its p50 on hits (a
     set of 1,000 inputs replayed after a warm-up), on misses with the cache on (fresh random
     inputs) and with it off;
  2. a closed loop over shared memory, one thread per core: throughput on hits against misses;
  3. batchd-http's /v1 under wrk at 64 connections, one fixed input: with the cache on (every
     request after the first a hit) against off, and nginx answering a fixed body on the same
     machine (bench/http-bench.sh's way: installed if missing);
  4. perf_analyzer over gRPC at concurrency 16 and 256 (sim backend, 2 devices, 2 ms + 20 us an
     item): a 90 % hit mix (the cache kept small, 64 KiB a segment, so that the cold inputs are gone
     before they come back) against 0 % hits (the cache off);
  5. what encrypting answers under a key from the input would add to a hit: SHA-256 of a 100-byte
     input and AES-128-GCM of a 64-byte answer, each per call (openssl speed);
  6. what FIFO eviction (the log's order) costs in hit ratio against CLOCK and LRU, simulated on a
     Zipf trace.
Each of 1-3 is the median of CACHE_TURNS (3) turns, hits and misses interleaved.
Writes bench/results/cache.json. Environment: CACHE_TURNS, CACHE_SECONDS (5).
"""

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import oip  # noqa: E402

TURNS = int(os.environ.get("CACHE_TURNS", "3"))
SECONDS = float(os.environ.get("CACHE_SECONDS", "5"))
CPU = ["--backend", "cpu", "--cost", "1"]
HIT_INPUTS = 1000


def input_file(work: Path, n: int, prefix: str) -> Path:
    rng = random.Random(48)
    path = work / f"{prefix}.txt"
    path.write_text("".join(prefix + "".join(rng.choice("abcdefghij") for _ in range(rng.randint(16, 250))) + "\n"
                            for _ in range(n)))
    return path


def stress(sock: Path, *flags) -> dict:
    run = benchlib.run_stress(sock, "--duration", str(SECONDS), *flags, timeout_s=SECONDS + 120)
    if run.get("errors", 0) or run.get("wrong", 0):
        raise SystemExit(f"bench: errors or wrong answers: {run}")
    return run


def shm_turn(work: Path, hits: Path) -> dict:
    out = {}
    for cache in ("on", "off"):
        proc, sock = benchlib.start_daemon(work, *CPU, "--cache", cache)
        with proc:
            if cache == "on":
                stress(sock, "--threads", "1", "--input-file", str(hits))  # warm: every input stored
                one_hit = stress(sock, "--threads", "1", "--input-file", str(hits))
                one_miss = stress(sock, "--threads", "1", "--input-bytes", "16:256")
                loop_hit = stress(sock, "--threads", str(os.cpu_count()), "--input-file", str(hits))
                loop_miss = stress(sock, "--threads", str(os.cpu_count()), "--input-bytes", "16:256")
                out.update(one_hit_p50_us=one_hit["p50_us"], one_miss_p50_us=one_miss["p50_us"],
                           loop_hit_per_s=loop_hit["rps"], loop_miss_per_s=loop_miss["rps"])
            else:
                out["one_off_p50_us"] = stress(sock, "--threads", "1", "--input-bytes", "16:256")["p50_us"]
    print("cache: shm " + ", ".join(f"{k} {v:.2f}" for k, v in out.items()), flush=True)
    return out


def http_turn(work: Path) -> dict:
    out = {}
    for cache in ("on", "off"):
        proc, sock = benchlib.start_daemon(work, *CPU, "--cache", cache)
        port = benchlib.free_port()
        http = benchlib.Process([benchlib.binary("frontend/batchd-http"), "--listen", f"127.0.0.1:{port}",
                                 "--socket", str(sock), "--log-level", "warn"], "batchd-http")
        with proc, http:
            oip.wait_ready(f"http://127.0.0.1:{port}/readyz", "batchd-http", http)
            run = oip.wrk(f"http://127.0.0.1:{port}/v1/batchstring", '{"input":"hello"}', 64, work)
            if run["non_2xx"] or run["errors"]:
                raise SystemExit(f"bench: wrk saw errors: {run}")
            out[f"v1_cache_{cache}_rps"] = run["rps"]
    return out


NGINX_CONF = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
{temps}  server {{
    listen 127.0.0.1:{port};
    location /v1/batchstring {{
      default_type application/json;
      return 200 '{{"output":"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}}';
    }}
  }}
}}
"""


def nginx_rps(work: Path) -> float:
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        package = "nginx-light" if "Candidate: (none)" not in subprocess.run(
            ["apt-cache", "policy", "nginx-light"], capture_output=True, text=True).stdout else "nginx"
        subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, capture_output=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    d = work / "nginx"
    d.mkdir(exist_ok=True)
    version = subprocess.run([nginx, "-V"], capture_output=True, text=True).stderr
    temps = ""
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        if f"--http-{kind.replace('_', '-')}-temp-path" in version:
            (d / kind).mkdir(exist_ok=True)
            temps += f"  {kind}_temp_path {d / kind};\n"
    port = benchlib.free_port()
    (d / "nginx.conf").write_text(NGINX_CONF.format(dir=d, temps=temps, port=port))
    proc = benchlib.Process([nginx, "-c", str(d / "nginx.conf"), "-g", "daemon off;"], "nginx")
    with proc:
        time.sleep(0.5)
        return oip.wrk(f"http://127.0.0.1:{port}/v1/batchstring", '{"input":"hello"}', 64, work)["rps"]


def pa_data(work: Path, hit_percent: int) -> Path:
    """20,000 requests: hit_percent of them one of 10 hot inputs, the rest inputs seen once a cycle."""
    rng = random.Random(7)
    rows = []
    for i in range(20000):
        text = f"hot-{rng.randrange(10)}" if rng.randrange(100) < hit_percent else f"cold-{i}-{rng.random()}"
        rows.append({"INPUT": [text]})
    path = work / f"pa-{hit_percent}.json"
    path.write_text(json.dumps({"data": rows}))
    return path


def perf_analyzer_points(work: Path) -> list:
    """perf_analyzer's contexts each replay the data from its start, so at a high concurrency they
    send the same row together: the cold rows hit too. The 0 % point therefore runs with the cache
    off (no hits, no coalescing); the hits each point saw are recorded beside it."""
    points = []
    # 0.3125 MiB over 5 segments: 64 KiB each, about 370 records, far fewer than a cycle's cold inputs.
    for hit_percent, cache in ((90, ["--cache", "on", "--cache-mib", "0.3125"]), (0, ["--cache", "off"])):
        daemon, sock = benchlib.start_daemon(work, *oip.SIM, *cache)
        port = benchlib.free_port()
        grpc = benchlib.Process([benchlib.binary("grpc_frontend/batchd-grpc"), "--listen", f"127.0.0.1:{port}",
                                 "--socket", str(sock), "--log-level", "warn"], "batchd-grpc")
        with daemon, grpc:
            time.sleep(1.0)
            data = pa_data(work, hit_percent)
            for concurrency in (16, 256):
                row = perf_analyzer(f"127.0.0.1:{port}", concurrency, data)
                row["hit_percent"] = hit_percent
                points.append(row)
    return points


def perf_analyzer(url: str, concurrency: int, data: Path) -> dict:
    report = data.with_suffix(f".{concurrency}.csv")
    args = [str(oip.VENV / "bin" / "perf_analyzer"), "-m", "batchstring", "-u", url, "-i", "grpc", "--async",
            "--concurrency-range", str(concurrency), "--measurement-interval", str(oip.WINDOW_MS),
            "--max-trials", "3", "-s", "50", "--input-data", str(data), "-f", str(report)]
    done = subprocess.run(args, capture_output=True, text=True, env=oip.perf_analyzer_env(),
                          timeout=oip.POINT_TIMEOUT_S)
    out = done.stdout + done.stderr
    row = {"concurrency": concurrency, "exit": done.returncode,
           "errors": sum(1 for line in out.splitlines() if "error" in line.lower())}
    if report.exists():
        import csv
        rows = list(csv.DictReader(report.read_text().splitlines()))
        if rows:
            row["infer_per_s"] = float(rows[0]["Inferences/Second"])
            row["p99_us"] = float(rows[0]["p99 latency"])
    hits = re.search(r"Cache hit count: (\d+)", out)
    misses = re.search(r"Cache miss count: (\d+)", out)
    if hits and misses:
        row["cache_hits"], row["cache_misses"] = int(hits.group(1)), int(misses.group(1))
    print(f"cache: perf_analyzer c={concurrency}: {row.get('infer_per_s', 0):.0f}/s "
          f"p99 {row.get('p99_us', 0) / 1000:.2f} ms, exit {done.returncode}", flush=True)
    return row


def eviction_sim() -> list:
    """Hit ratios of FIFO (the cache's), CLOCK and LRU on a Zipf trace (100,000 keys, exponent 0.99,
    1,000,000 requests), for caches of 1, 5 and 20 % of the keys: what reusing the log in FIFO order
    costs against orders that need to know about hits."""
    import bisect
    import itertools
    from collections import OrderedDict
    rng = random.Random(11)
    keys = 100_000
    weights = list(itertools.accumulate(1.0 / (k + 1) ** 0.99 for k in range(keys)))
    trace = [bisect.bisect(weights, rng.random() * weights[-1]) for _ in range(1_000_000)]
    rows = []
    for share in (0.01, 0.05, 0.20):
        size = int(keys * share)
        hits = {"fifo": 0, "clock": 0, "lru": 0}
        fifo, fifo_set = [], set()
        lru = OrderedDict()
        clock_keys, clock_ref, clock_at, hand = [None] * size, [False] * size, {}, 0
        head = 0
        for k in trace:
            if k in fifo_set:
                hits["fifo"] += 1
            else:
                if len(fifo) - head >= size:
                    fifo_set.discard(fifo[head])
                    head += 1
                fifo.append(k)
                fifo_set.add(k)
            if k in lru:
                hits["lru"] += 1
                lru.move_to_end(k)
            else:
                if len(lru) >= size:
                    lru.popitem(last=False)
                lru[k] = True
            if k in clock_at:
                hits["clock"] += 1
                clock_ref[clock_at[k]] = True
            else:
                while clock_keys[hand] is not None and clock_ref[hand]:
                    clock_ref[hand] = False
                    hand = (hand + 1) % size
                if clock_keys[hand] is not None:
                    del clock_at[clock_keys[hand]]
                clock_keys[hand], clock_ref[hand], clock_at[k] = k, False, hand
                hand = (hand + 1) % size
        row = {"cache_share": share, **{p: h / len(trace) for p, h in hits.items()}}
        print("cache: eviction sim " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
        rows.append(row)
    return rows


def openssl_ns(args: list) -> float:
    """ns per call of an `openssl speed` run of one block size."""
    out = subprocess.run(["openssl", "speed", "-seconds", "1", *args], capture_output=True, text=True).stdout
    match = re.search(r"^\S+\s+([\d.]+)k\s*$", out, re.M)
    if not match:
        raise SystemExit(f"bench: openssl speed printed no rate:\n{out[-1000:]}")
    kbytes_per_s = float(match.group(1))
    block = int(args[args.index("-bytes") + 1])
    return 1e9 / (kbytes_per_s * 1000 / block)


def main():
    turns = {"shm": [], "http": []}
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        work = Path(tmp)
        hits = input_file(work, HIT_INPUTS, "hit-")
        for t in range(TURNS):
            turns["shm"].append(shm_turn(work, hits))
            turns["http"].append(http_turn(work))
            print(f"cache: turn {t + 1}: {turns['http'][-1]}", flush=True)
        nginx = nginx_rps(work)
        pa = perf_analyzer_points(work)
    med = {k: statistics.median(r[k] for r in turns["shm"]) for k in turns["shm"][0]}
    med.update({k: statistics.median(r[k] for r in turns["http"]) for k in turns["http"][0]})
    med["nginx_rps"] = nginx
    crypto = {"sha256_100B_ns": openssl_ns(["-bytes", "100", "sha256"]),
              "aes128gcm_64B_ns": openssl_ns(["-bytes", "64", "-evp", "aes-128-gcm"])}
    ratios = {"loop_hit_over_miss": med["loop_hit_per_s"] / med["loop_miss_per_s"],
              "v1_hit_over_miss": med["v1_cache_on_rps"] / med["v1_cache_off_rps"],
              "v1_hit_over_nginx": med["v1_cache_on_rps"] / nginx,
              "one_miss_on_over_off": med["one_miss_p50_us"] / med["one_off_p50_us"]}
    print("cache: medians " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    print("cache: ratios " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    print("cache: encryption per hit " + ", ".join(f"{k} {v:.0f}" for k, v in crypto.items()))
    benchlib.write_result("cache.json", {"turns": turns, "median": med, "ratios": ratios, "perf_analyzer": pa,
                                         "encryption": crypto, "eviction": eviction_sim()})


if __name__ == "__main__":
    main()
