#!/usr/bin/env bash
# Regenerates every benchmark in docs/BENCHMARKS.md, in one run on this machine (13 minutes on
# 2 cores from a fresh clone, release build included; 11 once build-release is built):
#   1. installs what the benchmarks need from Debian (iceoryx, cmake to find it, matplotlib, wrk,
#      nginx),
#   2. builds the release tree (build-release: -Dbuildtype=release -Dtests=disabled),
#   3. bench/ipc.py     IPC round trip: batchd vs a Unix-domain socket vs iceoryx,
#      bench/openloop.py  open-loop throughput over shared memory: the highest rate held,
#   4. bench/sweep.py   batching gain and the max-batch x max-wait x load sweep (sim backend),
#      bench/shapes.py  the adaptive policy against a fixed grid on bursts, steps, a ramp, a swing
#      bench/cache.py   the response cache: hits against misses over shm, HTTP and gRPC
#      (25 minutes more),
#   5. bench/http-bench.sh  batchd-http vs nginx under wrk, and 10,000/s over HTTP,
#   6. bench/service.py  overload, idle CPU and a slow device, each against a same-run baseline,
#      bench/grants.py  remote floods claiming high over HTTP and gRPC, a token-granted caller
#      bench/fairness.py  a slow worker in the pool, a granted high flood beside a normal client,
#      langid behind batchd-http with the fair slice on and off and beside a second tenant,
#      bench/hostile.py  a light client beside a flood of small and of large inputs (and one
#      claiming high priority without a grant), against the light client alone,
#      bench/workers.py  worker processes: against the in-process backend, Python, the langid
#      example, chaos, attach/kill cycles (13 minutes more),
#      bench/hung_worker.py  a worker that hangs beside a good one, five runs (2 minutes more),
#      bench/jobs_queue.py  the jobs queue on Redis: a burst of 10x one node drained by 1, 2, 3 nodes,
#      and a job's latency at low load (5 minutes more),
#      bench/oip.py  the Open Inference Protocol under Triton's perf_analyzer (from .venv, which
#      scripts/setup_venv.sh makes), wrk on /v1 and /v2, and 10,000/s over gRPC (6 minutes more),
#      bench/models.py  many models in one daemon: a flood on one model beside a light client of
#      another (sim and cpu), and eight cpu models against one at the same total load,
#   7. bench/report.py  docs/BENCHMARKS.md and docs/bench/*.png from bench/results/*.json.
# Usage: bench/run-all.sh [ONLY...]   where ONLY picks steps: ipc openloop sweep shapes cache http service hostile grants
#   fairness workers hung jobs oip models report
# Environment: SWEEP_QUICK=1 (a 3x3x3 sweep, for trying the pipeline), SWEEP_POINT_S, IPC_DURATION,
# IPC_REPEATS, OPENLOOP_DURATION, OPENLOOP_RATES.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-release
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ipc openloop sweep shapes cache http service hostile grants fairness workers hung jobs oip models report)
wants() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
started=$SECONDS

build() {
  echo "== building $build"
  if [ -d "$build" ]; then
    meson setup --reconfigure "$build" >/dev/null  # picks up iceoryx if it was installed since
  else
    meson setup "$build" -Dbuildtype=release -Dtests=disabled >/dev/null
  fi
  ninja -C "$build" >/dev/null
}

# The build's packages, and the benchmarks': iceoryx (and cmake, through which meson finds it),
# matplotlib for the plots, wrk for the HTTP step (which installs nginx itself).
bash scripts/setup.sh iceoryx libiceoryx-posh-dev libiceoryx-hoofs-dev cmake python3-matplotlib wrk >/dev/null
# shellcheck source=../scripts/env.sh
. scripts/env.sh
build
export BATCHD_BENCH_BUILD=$PWD/$build
if wants ipc; then echo "== IPC round trip"; /usr/bin/python3 bench/ipc.py; fi
if wants openloop; then echo "== open-loop throughput"; /usr/bin/python3 bench/openloop.py; fi
if wants sweep; then echo "== batching gain and sweep"; /usr/bin/python3 bench/sweep.py; fi
if wants shapes; then echo "== load shapes"; /usr/bin/python3 bench/shapes.py; fi
if wants cache; then echo "== response cache"; /usr/bin/python3 bench/cache.py; fi
if wants http; then
  echo "== HTTP"
  BUILD=0 DURATION=${DURATION:-10} STRESS_DURATION=${STRESS_DURATION:-20} bash bench/http-bench.sh "$build"
fi
if wants service; then echo "== service: overload, idle, a slow device"; /usr/bin/python3 bench/service.py; fi
if wants hostile; then echo "== hostile: a light client beside floods"; /usr/bin/python3 bench/hostile.py; fi
if wants grants; then echo "== grants: remote floods claiming high, a token-granted caller"; /usr/bin/python3 bench/grants.py; fi
if wants fairness; then echo "== fairness: a slow worker, a granted flood, a second tenant"; /usr/bin/python3 bench/fairness.py; fi
if wants workers; then echo "== worker processes"; /usr/bin/python3 bench/workers.py; fi
if wants hung; then echo "== a worker that hangs beside a good one"; /usr/bin/python3 bench/hung_worker.py; fi
if wants jobs; then echo "== the jobs queue"; /usr/bin/python3 bench/jobs_queue.py; fi
if wants oip; then
  echo "== the Open Inference Protocol"
  scripts/setup_venv.sh
  /usr/bin/python3 bench/oip.py
fi
if wants models; then echo "== many models in one daemon"; /usr/bin/python3 bench/models.py; fi
if wants report; then /usr/bin/python3 bench/report.py; fi
echo "== done in $((SECONDS - started)) s"
