"""docs/BENCHMARKS.md section 5c (worker processes) from bench/results/workers.json."""


def _trials(side: dict) -> str:
    return ", ".join(f"{t:.1f}" for t in side.get("p50_us_trials", [side["run"]["p50_us"]]))


def _held(side: dict) -> str:
    return f"{side['highest_held']:,}/s" if side["highest_held"] else "none of the rates"


def _handoff(h: dict) -> str:
    if not h or not h.get("batches"):
        return "not measured"
    return (f"{h['within_10us'] * 100:.0f} % of {h['batches']:,} batches within 10 µs (p50 ≤ {h['p50_le_us']:g} µs, "
            f"p99 ≤ {h['p99_le_us']:g} µs), mean {h['mean_us']:.1f} µs")


def _chaos_row(label: str, c: dict) -> str:
    return (f"| {label} | {c['events']} | {c['shm']['sent']:,} / {c['http']['sent']:,} | {c['errors']} | {c['wrong']} | "
            f"{c['shm']['p99_us'] / 1000:.1f} | {c['http']['p99_us'] / 1000:.1f} |")


def workers_section(result: dict) -> str:
    if not result:
        return "_Not measured yet: `bench/workers.py`._"
    out = []
    cpu = result.get("cpu")
    if cpu:
        out += [
            "**C++ worker against the in-process backend** (open loop over shared memory, "
            f"{result['step_s']:g} s per rate after 1 s of warm-up, inputs of 16 to 256 bytes; a rate is held "
            "with 0 errors and 0 wrong):", "",
            "| | highest rate held | worker / in-process |", "|---|---:|---:|",
            f"| cpu backend in the daemon | {_held(cpu['in_process'])} | |",
            f"| `batchd-worker --backend cpu`, same threads | {_held(cpu['worker'])} | **{cpu['ratio']:.2f}** |", "",
            "Each batch's hand-off to the worker and back (the daemon's `batchd_worker_handoff_seconds`: the "
            "batch's run on its lane less the model's time). The inputs are not copied on the way: the drain "
            "loop assembles each batch in the input arena, which the worker maps read-only and reads in place "
            "(docs/WORKERS.md).", "",
            f"- one request at a time (one client thread, closed loop: "
            f"{cpu['closed_loop_1']['ok'] / cpu['closed_loop_1']['duration_s']:,.0f} requests/s, p50 "
            f"{cpu['closed_loop_1']['p50_us']:.1f} µs end to end): {_handoff(cpu['handoff_closed_loop_1'])};",
            f"- at 100,000 requests/s: {_handoff(cpu['handoff_at_100k'])};",
            f"- over the whole ladder: {_handoff(cpu['handoff_overall'])}.", "",
        ]
    py = result.get("python")
    if py:
        out += [
            f"**Python worker** (`batchd.Worker(...).serve(fn)` with `hashlib.sha256` over each input, one "
            f"thread): highest rate held **{_held(py['sha256'])}**. Its overhead per batch, from a model that "
            "costs nothing (it reverses each input; checked with `--expect-sim 1`), one request at a time, "
            "each side three times in turn: median p50 round trip "
            f"{py['zero_cost_python']['run']['p50_us']:.1f} µs (of {_trials(py['zero_cost_python'])}) against "
            f"{py['zero_cost_cpp']['run']['p50_us']:.1f} µs (of {_trials(py['zero_cost_cpp'])}) for "
            "`batchd-worker --backend sim` at zero cost: "
            f"**{py['python_overhead_per_batch_us']:.1f} µs** a batch for taking the GIL from a foreign thread, the "
            "lists and the str conversions.", "",
        ]
    lang = result.get("langid")
    if lang:
        ip = lang["in_process"]
        http = lang["http_64"]
        out += [
            f"**examples/langid** ({ip['texts']:,} sentences in 12 languages, `examples/langid/sentences.py`):", "",
            "| | texts/s | ratio |", "|---|---:|---:|",
            f"| py3langid, one text at a time, one process | {ip['one_by_one_per_s']:,.0f} | 1 |",
            f"| batched scoring (`langid_batch.py`, 256 a batch), one process | {ip['batched_per_s']:,.0f} | "
            f"**{lang['batched_over_one_by_one']:.2f}** |",
            f"| batchd-http + daemon + one worker, 64 connections, closed loop (64 requests in flight) | "
            f"{http['ok'] / http['duration_s']:,.0f} | **{lang['http_over_batched']:.2f}** of batched |",
            f"| the same, 64 connections, open loop (pipelined, up to 16 a connection): highest rate held | "
            f"{lang['http_64_open_highest_held']:,} | **{lang['http_open_over_batched']:.2f}** of batched |", "",
            "The open loop's rates, each 0 errors and 0 wrong unless marked, with p99 from intended send time: "
            + ", ".join(f"{r['rate']:,}/s {r['p99_us'] / 1000:.1f} ms" + ("" if r["held"] else " (not held)")
                        for r in lang["http_64_open"]) + ".", "",
            f"The load generator, batchd-http, the daemon and the worker share the 2 cores: the worker had "
            f"{lang['worker_core_share']:.2f} of a core during that run (daemon {lang['cpu_s']['daemon'] / http['duration_s']:.2f}, "
            f"batchd-http {lang['cpu_s']['batchd-http'] / http['duration_s']:.2f}; the rest went to the load "
            f"generator's 64 threads). Per second of the worker's own CPU it answered "
            f"**{lang['per_worker_cpu_over_batched']:.2f}** of the batched scoring's texts per second: its batches are "
            "at most 64 (64 connections, one request each), where the batched scoring gains least. With the "
            "connections pipelined (the open loop) batches grow to 256 and the rate held is the second row's.", "",
            f"Answers identical to the package's: {'yes' if ip['identical'] else 'NO'} in process; over HTTP "
            f"{http['ok']:,} answered, {http['wrong']} wrong, {http['errors']} errors (each checked against the "
            "package's own answer with `batchd-stress --input-file` and its outputs).", "",
        ]
    if result.get("chaos_kill") and result.get("chaos_rolling"):
        out += [
            "**Chaos** (`bench/workers.py chaos`): 3 `batchd-worker --backend cpu`, 5,000 requests/s over shared "
            "memory and 5,000 over HTTP (batchd-http) for "
            f"{result['chaos_kill']['shm']['duration_s']:.0f} s, every answer checked:", "",
            "| | events | sent (shm / HTTP) | errors | wrong | p99 shm (ms) | p99 HTTP (ms) |",
            "|---|---:|---:|---:|---:|---:|---:|",
            _chaos_row("a worker SIGKILLed every 2 s and restarted; one SIGSTOPped for 5 s", result["chaos_kill"]),
            _chaos_row("rolling replacement: a new worker, then SIGTERM to an old one, every 5 s",
                       result["chaos_rolling"]), "",
        ]
    cyc = result.get("cycles")
    if cyc:
        b, a = cyc["before"], cyc["after"]
        out += [
            f"**{cyc['cycles']:,} attach/kill cycles** ({cyc['seconds']:.0f} s; `batchd-worker` attaches and is "
            f"SIGKILLed): the daemon's resident memory {b['rss_kib']:,} KiB before, {a['rss_kib']:,} KiB after; "
            f"open descriptors {b['fds']} before, {a['fds']} after; worker regions mapped after: {a['worker_maps']}.",
        ]
    return "\n".join(out)
