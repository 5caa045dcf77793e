#!/usr/bin/env python3
"""Python client against the C++ client: requests/s of batchd (the Python package) in sync calls
from 1 and 8 threads and in asyncio with N requests in flight, beside batchd-stress (the C++
client, closed loop) with as many threads, on one daemon (cpu backend, cost 1) for the same
duration. Every answer is checked on both sides. Prints a ratio table and writes a JSON file.

    bench/python_client.py                         # 5 s per row, into bench/results/
    bench/python_client.py --duration 0.3 --out /tmp/py.json   # a smoke check

The package comes from the build tree (BATCHD_BENCH_BUILD, default build-release:
python/src) unless it is installed; the daemon and batchd-stress from the same build.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

try:
    import batchd
except ImportError:
    sys.path.insert(0, str(benchlib.build_dir() / "python" / "src"))
    import batchd


def inputs(seed: int, count: int = 4096) -> list[tuple[str, str]]:
    """(input, expected answer) pairs: 16 to 256 printable bytes, like batchd-stress's default."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(rng.randint(16, 256)))
        out.append((text, hashlib.sha256(text.encode()).hexdigest()))
    return out


def sync_rps(client: batchd.Client, threads: int, duration_s: float, work: list[tuple[str, str]]) -> float:
    counts = [0] * threads
    wrong: list[str] = []
    start = threading.Barrier(threads + 1)
    deadline = [0.0]

    def run(index: int) -> None:
        start.wait()
        n = 0
        i = index * 97
        while time.monotonic() < deadline[0]:
            text, want = work[i % len(work)]
            if client.submit(text, timeout=5) != want:
                wrong.append(text)
            n += 1
            i += 1
        counts[index] = n

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    began = time.monotonic()
    deadline[0] = began + duration_s
    start.wait()
    for t in pool:
        t.join()
    elapsed = time.monotonic() - began
    if wrong:
        raise SystemExit(f"bench: {len(wrong)} wrong answers in Python sync ({threads} threads)")
    return sum(counts) / elapsed


def async_rps(client: batchd.Client, in_flight: int, duration_s: float, work: list[tuple[str, str]]) -> float:
    async def lane(index: int, deadline: float) -> int:
        n = 0
        i = index * 97
        while time.monotonic() < deadline:
            text, want = work[i % len(work)]
            if await client.submit_async(text, timeout=5) != want:
                raise SystemExit(f"bench: wrong answer in asyncio for {text!r}")
            n += 1
            i += 1
        return n

    async def main() -> float:
        began = time.monotonic()
        done = await asyncio.gather(*(lane(i, began + duration_s) for i in range(in_flight)))
        return sum(done) / (time.monotonic() - began)

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per row and side")
    parser.add_argument("--async-in-flight", type=int, default=256, help="asyncio requests in flight")
    parser.add_argument("--out", type=Path, default=benchlib.RESULTS / "python_client.json")
    args = parser.parse_args()
    work = inputs(seed=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-py-") as tmp:
        daemon, sock = benchlib.start_daemon(Path(tmp), "--backend", "cpu")
        with daemon, batchd.Client(str(sock)) as client:
            plan = [("sync, 1 thread", 1, lambda: sync_rps(client, 1, args.duration, work)),
                    ("sync, 8 threads", 8, lambda: sync_rps(client, 8, args.duration, work)),
                    (f"asyncio, {args.async_in_flight} in flight", args.async_in_flight,
                     lambda: async_rps(client, args.async_in_flight, args.duration, work))]
            for name, threads, measure in plan:
                python = measure()
                cpp = benchlib.run_stress(sock, "--threads", str(threads), "--duration", str(args.duration))
                if cpp["wrong"] or cpp["errors"]:
                    raise SystemExit(f"bench: batchd-stress --threads {threads}: {cpp}")
                rows.append({"mode": name, "cpp_threads": threads, "python_rps": round(python, 1),
                             "cpp_rps": round(cpp["rps"], 1), "ratio": round(python / cpp["rps"], 3)})
    print(f"{'Python client':<28} {'Python req/s':>13} {'C++ (threads)':>14} {'C++ req/s':>11} {'ratio':>6}")
    for r in rows:
        print(f"{r['mode']:<28} {r['python_rps']:>13.0f} {r['cpp_threads']:>14} {r['cpp_rps']:>11.0f} "
              f"{r['ratio']:>6.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": benchlib.machine(), "duration_s": args.duration,
                                    "rows": rows}, indent=1) + "\n")
    print(f"bench: wrote {args.out}")


if __name__ == "__main__":
    main()
