#!/usr/bin/env python3
"""A batchd worker that identifies the language of each input with py3langid (its model ships
inside the package: nothing to download), scoring a whole batch at once (langid_batch.py).

    batchd --backend workers &
    python3 examples/langid/worker.py &
    batchd-http --listen 127.0.0.1:8080 &
    curl -d '{"input": "Bonjour tout le monde"}' http://127.0.0.1:8080/v1/batchstring
    {"output":"fr"}

Exits 0 on SIGTERM (after answering what it runs), 75 when the daemon goes away: a service
manager restarts it (README.md, "Under systemd").
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

import batchd

from langid_batch import BatchIdentifier

# Larger batches than this are scored in pieces of this size: the batched scoring is fastest
# around it on this kind of machine (README.md, "Numbers"), as its working set stays in cache.
CHUNK = 256


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", help="the daemon's socket (default: a client's default)")
    parser.add_argument("--concurrency", type=int, default=1, help="batches scored at once")
    args = parser.parse_args()
    identifier = BatchIdentifier()

    def identify(texts: list[str]) -> list[str]:
        labels: list[str] = []
        for start in range(0, len(texts), CHUNK):
            labels += identifier.classify(texts[start:start + CHUNK])
        return labels

    worker = batchd.Worker(args.socket, name="langid", version=importlib.metadata.version("py3langid"),
                           concurrency=args.concurrency)
    print(f"langid worker {worker.worker_id} attached", flush=True)
    return 0 if worker.serve(identify) else 75


if __name__ == "__main__":
    sys.exit(main())
