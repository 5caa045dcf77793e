#!/usr/bin/env bash
# A stand-in for bench/gpu_check in the dry run of bench/gpu-check.sh (check_gpu_check.sh): it
# answers the same calls with the lines and JSON keys the real program writes, with made-up
# numbers, and can be told what to do:
#   FAKE_DRIVER_VERSION, FAKE_RUNTIME_VERSION   what `versions` reports (CUDA 13.0 both by default)
#   FAKE_FAIL=STEP   that step reports a mismatch and exits 1 (STEP as the script names it:
#                    correctness-cost1000, throughput-cost1, ...)
#   FAKE_HANG=STEP   that step never ends (the script's timeout must cut it)
#   FAKE_CALLS=FILE  each call's arguments are appended to FILE, one line per call
set -uo pipefail

step="" cost=1 strings=1000000 json=""
args=("$@")
while [ $# -gt 0 ]; do
  case $1 in
    versions | correctness | throughput) step=$1 ;;
    --cost) cost=$2; shift ;;
    --strings) strings=$2; shift ;;
    --json) json=$2; shift ;;
    *) echo "fake gpu_check: unexpected argument $1" >&2; exit 64 ;;
  esac
  shift
done
[ -n "$step" ] || { echo "fake gpu_check: no step" >&2; exit 64; }
[ -n "${FAKE_CALLS:-}" ] && echo "${args[*]}" >>"$FAKE_CALLS"

name=$step
[ "$step" = versions ] || name="$step-cost$cost"
# exec, so that the timeout's signal reaches the sleeping process itself and leaves nothing behind.
[ "${FAKE_HANG:-}" = "$name" ] && exec sleep 3600
wrong=0
[ "${FAKE_FAIL:-}" = "$name" ] && wrong=3

write() { if [ -n "$json" ]; then printf '%s\n' "$1" >"$json"; fi; }

case $step in
  versions)
    driver=${FAKE_DRIVER_VERSION:-13000} runtime=${FAKE_RUNTIME_VERSION:-13000} devices=1 error=""
    if [ "$driver" -lt "$runtime" ]; then
      devices=0 error="CUDA driver version is insufficient for CUDA runtime version"
    fi
    summary="driver supports CUDA $((driver / 1000)).$((driver % 1000 / 10)), static runtime CUDA $((runtime / 1000)).$((runtime % 1000 / 10)), $devices device(s)${error:+: $error}"
    echo "versions: $summary"
    write "{\"step\": \"versions\", \"driver_version\": $driver, \"runtime_version\": $runtime, \"devices\": $devices, \"device_error\": \"$error\", \"summary\": \"$summary\"}"
    ;;
  correctness)
    summary="$strings strings (5121 at padding boundaries up to 65536 B), $wrong mismatches, 0 failed batches"
    echo "correctness cost $cost: $strings strings (5121 at padding boundaries up to 65536 bytes), $wrong mismatches, 0 failed batches, 0.1 s"
    write "{\"step\": \"correctness\", \"cost\": $cost, \"strings\": $strings, \"boundary_strings\": 5121, \"max_input_bytes\": 65536, \"mismatches\": $wrong, \"failed_batches\": 0, \"seconds\": 0.100, \"first_problem\": \"\", \"device\": {\"name\": \"fake\", \"sm\": \"9.0\", \"multiprocessors\": 132}, \"summary\": \"$summary\"}"
    if [ "$wrong" -ne 0 ]; then echo "gpu_check: MISMATCH"; exit 1; fi
    echo "gpu_check: all answers match the CPU reference"
    ;;
  throughput)
    points="" sep=""
    for batch in 1 64 1024 8192 65536; do
      echo "throughput cost $cost batch $batch: kernel 10.0 us/batch $((batch * 100000)) inputs/s 1.00 GB/s | run() 1 lane 1 inputs/s, 8 lanes 1 inputs/s"
      points+="$sep{\"batch\": $batch, \"input_bytes\": $((batch * 136)), \"kernel_us_per_batch\": 10.00, \"kernel_inputs_per_s\": $((batch * 100000)), \"kernel_gb_per_s\": 1.000, \"run_one_lane_inputs_per_s\": 1, \"run_all_lanes_inputs_per_s\": 1}"
      sep=", "
    done
    write "{\"step\": \"throughput\", \"cost\": $cost, \"devices\": 1, \"streams_per_device\": 2, \"failed\": $([ "$wrong" -eq 0 ] && echo false || echo true), \"device\": {}, \"points\": [$points], \"summary\": \"batch 65536: kernel 6.55e+09 inputs/s, 1 GB/s\"}"
    if [ "$wrong" -ne 0 ]; then echo "gpu_check: a throughput batch failed" >&2; exit 1; fi
    ;;
esac
exit 0
