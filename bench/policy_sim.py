#!/usr/bin/env python3
"""A discrete-event model of batchd's two flush rules on L lanes with batch cost a + b*n and
Poisson arrivals: the fixed rule (max-batch, max-wait; batches queue behind busy lanes, up to
lanes + 2 batch objects, as the daemon's pool allows) against the adaptive rule of
daemon/batch_policy.cpp for several target utilisations u. It is how kTargetUtilization was
chosen (docs/POLICY.md); the daemon's own numbers come from bench/sweep.py.
Usage: policy_sim.py [u ...]   (default: 0.7 0.8 0.9 1.0)
Prints p99 latency (ms) per load, the best fixed setting of a small grid beside it."""

import math
import random
import sys

A = 2000e-6          # fixed cost per batch (s): the sim backend's default
B = 20e-6            # cost per request (s)
LANES = 2
SPARE = 2            # the daemon's --spare-batches default
CAP64 = LANES * 64 / (A + B * 64)   # capacity with batches of 64: the loads' 100%


def cost(n):
    return A + B * n


def target(rate, u, max_batch):
    spare = u * LANES - rate * B
    if spare <= 0:
        return max_batch
    return min(max_batch, max(1, math.ceil(rate * A / spare)))


def simulate(rate, rule, seconds=2.0, seed=1):
    """rule: ("fixed", max_batch, max_wait_s) or ("adaptive", u, max_batch, max_wait_s)."""
    rnd = random.Random(seed)
    arrivals, t = [], 0.0
    while t < seconds:
        t += rnd.expovariate(rate)
        arrivals.append(t)
    free_at = [0.0] * LANES          # when each lane finishes what it holds
    queued = [[] for _ in range(LANES)]  # finish times of batches held by each lane
    latencies, waiting = [], []
    now, i = 0.0, 0

    def run(take, start):
        lane = min(range(LANES), key=lambda k: free_at[k])
        end = max(start, free_at[lane]) + cost(len(take))
        free_at[lane] = end
        queued[lane].append(end)
        latencies.extend(end - a for a in take)

    while True:
        flushed = False
        if waiting:
            n = len(waiting)
            if rule[0] == "fixed":
                _, max_batch, max_wait = rule
                for k in range(LANES):
                    queued[k] = [e for e in queued[k] if e > now]
                objects = sum(len(q) for q in queued)
                if objects < LANES + SPARE and (n >= max_batch or now - waiting[0] >= max_wait - 1e-12):
                    take, waiting[:] = waiting[:max_batch], waiting[max_batch:]
                    run(take, now)
                    flushed = True
            else:
                _, u, max_batch, max_wait = rule
                idle = any(f <= now for f in free_at)
                n_star = target(rate, u, max_batch)
                if (n >= max_batch or now - waiting[0] >= max_wait - 1e-12 or
                        (idle and (n >= n_star or now >= waiting[0] + (n_star - 1) / rate - 1e-12))):
                    take, waiting[:] = waiting[:max_batch], waiting[max_batch:]
                    run(take, now)
                    flushed = True
        if flushed:
            continue
        events = [arrivals[i]] if i < len(arrivals) else []
        events += [f for f in free_at if f > now]
        if waiting:
            if rule[0] == "fixed":
                events.append(waiting[0] + rule[2])
                events += [e for q in queued for e in q if e > now]
            else:
                events.append(waiting[0] + rule[3])
                events.append(waiting[0] + (target(rate, rule[1], rule[2]) - 1) / rate)
        events = [e for e in events if e > now]
        if not events:
            break
        now = min(events)
        while i < len(arrivals) and arrivals[i] <= now:
            waiting.append(arrivals[i])
            i += 1
    latencies.sort()
    return latencies[int(len(latencies) * 0.99)] * 1e3


def main():
    us = [float(x) for x in sys.argv[1:]] or [0.7, 0.8, 0.9, 1.0]
    print(f"model: {A * 1e3:g} ms + {B * 1e6:g} us/request, {LANES} lanes; p99 ms")
    print("load  best fixed (max-batch, max-wait ms)  " + "  ".join(f"u={u:<5g}" for u in us))
    for load in (0.1, 0.25, 0.5, 0.75, 0.9, 1.1):
        rate = load * CAP64
        best = min((simulate(rate, ("fixed", mb, w / 1e3)), mb, w)
                   for mb in (16, 32, 64, 128) for w in (0, 1, 5, 10))
        adaptive = [simulate(rate, ("adaptive", u, 256, 0.05)) for u in us]
        print(f"{load:4.2f}  {best[0]:6.2f} ({best[1]:3}, {best[2]:2})" + " " * 20 +
              "  ".join(f"{p:7.2f}" for p in adaptive))


if __name__ == "__main__":
    main()
