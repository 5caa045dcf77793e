"""docs/BENCHMARKS.md's jobs queue section, from bench/results/jobs_queue.json (bench/jobs_queue.py) and
bench/results/jobs_fastpath_ab.json (bench/fastpath_ab.py against the commit before the queue)."""


def jobs_queue_section(result, fastpath) -> str:
    if not result:
        return "_Not measured yet: run `bench/jobs_queue.py`._"
    runs = result["runs"]
    first = runs[0]
    out = [f"A burst of {first['offered_inputs_per_s']:.0f} inputs/s (10x one node's device ceiling of "
           f"{result['node_ceiling_inputs_per_s']:.0f}) for {result['burst_s']:.0f} s, {first['jobs']:,} jobs of "
           f"{first['inputs_per_job']} inputs, submitted through node 1's batchd-http while 1, 2 or 3 nodes consume "
           "(each: 2 sim devices, batches of 16 at 8 ms); drained: from the first submission until the stream is "
           "empty; every job's every output checked:", "",
           "| consuming nodes | refused | drained in | inputs/s | of their ceiling | vs 1 node | right | wrong |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    one = runs[0]["drain_inputs_per_s"]
    for r in runs:
        out.append(f"| {r['consuming_nodes']} | {r['refused']} | {r['drained_in_s']:.1f} s | {r['drain_inputs_per_s']:,} | "
                   f"{r['of_ceiling']:.0%} | {r['drain_inputs_per_s'] / one:.2f}x | {r['right']:,} | {r['wrong']} |")
    lat = result.get("latency")
    if lat:
        out += ["", f"At low load, one node, {lat['n']} one-input jobs one at a time (polled every 0.2 ms) beside as many "
                f"synchronous `/v1/batchstring` requests: a job's submit-to-result p50 {lat['job_p50_ms']} ms "
                f"(p99 {lat['job_p99_ms']}), a synchronous request's p50 {lat['sync_p50_ms']} ms "
                f"(p99 {lat['sync_p99_ms']}): the queue adds {lat['job_p50_ms'] - lat['sync_p50_ms']:.2f} ms at the median."]
    if fastpath:
        med = fastpath["median"]
        ratio = fastpath["new_over_base"]
        out += ["", f"The synchronous paths cost nothing: `bench/fastpath_ab.py` against "
                f"{fastpath.get('base_commit', 'the commit before')} (medians of {len(fastpath['turns']['new'])} "
                f"alternated turns): `/v1` under wrk at 64 connections {med['new']['http_v1_rps']:,.0f} against "
                f"{med['base']['http_v1_rps']:,.0f} requests/s ({ratio['http_v1_rps']:.3f}x); one caller's p50 "
                f"{ratio['one_caller_p50_us']:.3f}x; the highest open-loop rate held {ratio['openloop_held']:.3f}x."]
    return "\n".join(out)
