"""The analytic model of wait-or-full batching on D devices whose batch of n costs
t(n) = fixed + per_item * n. Used by sweep.py beside the measurements.

- capacity(B) = D * B / t(B): every device always busy with full batches.
- n_busy = lambda * fixed / (D - lambda * per_item): the batch size at which D devices are
  exactly busy at rate lambda. Beyond B, the setting is overloaded (admission rejects).
- Timer mode: a batch closes when it holds B requests or its first request has waited W, so at
  Poisson rate lambda it holds n_fill = min(B, 1 + lambda * W). When n_fill > n_busy the devices
  keep up: a request waits for its batch to close (the first one min(W, (n - 1) / lambda), an
  average one half of that), for a device (Kingman's approximation for D servers, deterministic
  service; batch arrivals have squared coefficient of variation 1/n when batches close full,
  about 1/n^2 when they close on the timer), and t(n).
- Backlog mode: when n_fill <= n_busy (W = 0, or W too short for the rate) the devices cannot keep
  up with batches that small. The daemon holds one batch object per device lane plus
  --spare-batches (2); with all of them busy, requests pile up and the next free object takes
  the whole pile. Batches settle at n_busy with the devices always busy; a request waits for a
  free object (up to t / D), behind the batches queued on its lane (t each: one with two spares
  on two lanes, none with --spare-batches 0), then for its own (t): p99 about
  (1 + 1/D + q) * t(n_busy) with q = min(1, spares / lanes), p50 about (1 + 1/(2D) + q) * t.
  The same bound caps the timer mode's queueing, since the pool holds at most q waiting batches
  per lane.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    fixed_us: float
    per_item_us: float
    devices: int

    def batch_s(self, n: float) -> float:
        return (self.fixed_us + self.per_item_us * n) / 1e6

    def capacity(self, max_batch: int) -> float:
        return self.devices * max_batch / self.batch_s(max_batch)


@dataclass
class Prediction:
    batch: float          # requests per batch
    utilization: float    # of the devices
    p50_ms: float
    p99_ms: float
    stable: bool
    mode: str             # timer, backlog or overloaded (see above)


def predict(cost: CostModel, max_batch: int, max_wait_ms: float, rate: float, spare_batches: int = 2) -> Prediction:
    d = cost.devices
    queued = min(1.0, spare_batches / d)  # batches waiting per lane in backlog (one lane per sim device)
    fixed_s, item_s = cost.fixed_us / 1e6, cost.per_item_us / 1e6
    n_busy = rate * fixed_s / (d - rate * item_s) if rate * item_s < d else math.inf
    if n_busy >= max_batch:
        return Prediction(float(max_batch), rate * cost.batch_s(max_batch) / (d * max_batch), math.inf, math.inf,
                          False, "overloaded")
    n_fill = max(1.0, min(float(max_batch), 1.0 + rate * max_wait_ms / 1e3))
    if n_fill <= n_busy:
        n = max(1.0, n_busy)
        t = cost.batch_s(n)
        return Prediction(n, 1.0, (1.0 + queued + 1.0 / (2 * d)) * t * 1e3, (1.0 + queued + 1.0 / d) * t * 1e3, True,
                          "backlog")
    n = n_fill
    t = cost.batch_s(n)
    rho = rate * t / (d * n)
    ca2 = 1.0 / n if n >= max_batch else 1.0 / (n * n)
    queue_mean_s = t / d * rho ** (math.sqrt(2.0 * (d + 1)) - 1.0) / (1.0 - rho) * ca2 / 2.0
    fill_s = min(max_wait_ms / 1e3, (n - 1.0) / rate)
    backlog_bound_s = (1.0 + queued + 1.0 / d) * t
    p50 = fill_s / 2.0 + min(t + queue_mean_s * math.log(2.0), backlog_bound_s)
    p99 = fill_s + min(t + queue_mean_s * math.log(100.0), backlog_bound_s)
    return Prediction(n, rho, p50 * 1e3, p99 * 1e3, True, "timer")
